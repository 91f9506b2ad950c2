"""Exports: the Perfetto overlay and the self-contained HTML report."""
