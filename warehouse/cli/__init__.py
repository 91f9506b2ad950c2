"""The command line: one parser per command over the Python API, output formats, the demo."""
