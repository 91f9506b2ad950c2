"""The Parquet lake: the same ingest and analyze as Dask tasks, one per trace file or rank."""
