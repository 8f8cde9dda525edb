"""rlvr-run: declarative experiment runner for RLVR post-training of code models.

Library first: every stage (load, validate, plan, materialize, execute, report)
is a plain function importable from here; `engine.cli` is a thin layer on top.
"""

__version__ = "0.1.0"
