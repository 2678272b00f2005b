"""The `tickwork` command-line client of the API (jobs, runs, apply, preview)."""
