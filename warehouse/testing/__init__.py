"""Helpers for tests and benchmarks (not used by the package itself): `tracebuilder` writes
hand-made Kineto traces."""
