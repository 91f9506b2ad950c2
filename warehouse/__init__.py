"""ctda-sql: a SQL warehouse for PyTorch profiler (Kineto) traces, with CTDA-CPA critical paths.

The public Python API is what this module exports:

    from ctda_sql import Warehouse, CtdaError

The package reads like the product (each subpackage depends only on those below it; tests/
test_layers.py enforces it): shell over cli over api over export over advice over whatif over lake over
engine | ingest over core over udfs. SQL lives in ctda_sql.sql and ctda_sql.queries."""

__version__ = "0.1.0"

from typing import TYPE_CHECKING  # noqa: E402

from ctda_sql.core.errors import CtdaError  # noqa: E402

if TYPE_CHECKING:
    from ctda_sql.api import Warehouse

__all__ = ["CtdaError", "Warehouse", "__version__"]


def __getattr__(name: str):
    # Warehouse imports DuckDB (~0.15 s): every submodule import runs this file first, and
    # `ctda-sql --help` or `--version` should not pay for it
    if name == "Warehouse":
        from ctda_sql.api import Warehouse
        return Warehouse
    raise AttributeError(f"module 'ctda_sql' has no attribute {name!r}")
