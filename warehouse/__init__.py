"""ctda-sql: a SQL warehouse for PyTorch profiler (Kineto) traces, with CTDA-CPA critical paths.

The public Python API is what this module exports:

    from ctda_sql import Warehouse, CtdaError

The package reads like the product (each subpackage depends only on those below it; tests/
test_layers.py enforces it): shell over cli over api over export | whatif over lake over
engine | ingest over core over udfs. SQL lives in ctda_sql.sql and ctda_sql.queries."""

__version__ = "0.1.0"

from ctda_sql.api import Warehouse  # noqa: E402
from ctda_sql.core.errors import CtdaError  # noqa: E402

__all__ = ["CtdaError", "Warehouse", "__version__"]
