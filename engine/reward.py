"""verl reward entry: `compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`.

    reward.custom_reward_function.path=<repo>/engine/reward.py
    reward.custom_reward_function.name=compute_score

verl loads this file by path under a generated module name that is not in
`sys.modules`, so nothing that needs its own module at import time (dataclasses,
pickling) may be defined here; the implementation and its process-wide judge
live in the package module `engine.judge.reward`, which also keeps one
judge per process however many times verl loads this file. See that module for
the modes, settings and the returned keys.
"""

from engine.judge.reward import (
    VERDICT_CODES,
    compute_score,
    compute_score_async,
    compute_score_batch,
)
from engine.judge.reward_settings import RewardSettings

__all__ = ["VERDICT_CODES", "RewardSettings", "compute_score", "compute_score_async", "compute_score_batch"]
