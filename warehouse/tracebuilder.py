"""Compatibility shim while tests move to the new path: use ctda_sql.testing.tracebuilder."""

from ctda_sql.testing.tracebuilder import (DEFAULT_BASE_TS, LEGACY_CATEGORIES, Thread,  # noqa: F401
                                           TraceBuilder, legacy_events)
