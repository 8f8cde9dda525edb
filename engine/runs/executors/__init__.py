"""Executors: where a run's launch.sh runs (this machine's processes, ...), behind one protocol."""
