"""The core every layer stands on: the connection, transactions, SQL files, errors, signals, progress, settings and dialects."""
