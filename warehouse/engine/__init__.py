"""The engine: the CTDA-CPA critical path of every step (analyze), the path across ranks (crossrank) and saved reports."""
