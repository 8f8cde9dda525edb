"""A validated spec → a DAG of runs with content-addressed ids (pure: reads and writes nothing)."""
