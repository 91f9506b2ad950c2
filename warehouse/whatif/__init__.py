"""What-if: replay each step's dependency graph under a change, on the measured cluster or a described one (SimGrid)."""
