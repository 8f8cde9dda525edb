"""Pricing a study before it runs: the cost model, the executor's packing on a fake clock, the
detectable differences, and forecast against actual (docs/cost.md)."""
