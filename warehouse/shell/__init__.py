"""The interactive ctda-sql shell (prompt_toolkit), layered on top of the warehouse."""
