"""Ingest: Kineto trace files decoded, typed and loaded into the warehouse, and experiment metadata."""
