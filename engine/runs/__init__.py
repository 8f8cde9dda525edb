"""Plan → run directories → execution in DAG order → lineage; the `run` verb's pipeline."""
