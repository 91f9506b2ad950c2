"""ctda-sql warehouse: ingest Kineto traces into DuckDB and analyse their critical paths."""

__version__ = "0.1.0"
