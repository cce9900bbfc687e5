"""The combination suite's cases (seed 000). Cases registered here replace the catalog's placeholder rows."""
