"""ctda-sql warehouse: ingest Kineto traces into DuckDB and analyse their critical paths."""

__version__ = "0.1.0"

from .api import Warehouse  # noqa: E402  (the public Python API)

__all__ = ["Warehouse", "__version__"]
