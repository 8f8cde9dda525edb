"""The reward manager of rlvr-run's verl RL runs: verl's `naive` one, that also tells our reward the
step of the rollout it scores.

verl 0.9.1 scores a rollout in its reward loop (`NaiveRewardManager.run_single`, called from the
agent loop's `_compute_score`) with `compute_score(data_source, solution_str, ground_truth,
extra_info)`. `extra_info` is the data row's, plus the agent loop output's `extra_fields`, whose
`global_steps` is the *weights'* version the rollout server generated with (verl's `llm_server`
sets it on every output, vLLM's server and the `rlvr_hf` one alike), not the step the rollout is
for. That step is the batch's `global_steps` (verl's v1 trainer sets it on every batch it hands the
agent loop, training and validation, and tags the rollout with it in its TransferQueue); it
reaches the reward loop as a field of the rollout's data, which `naive` does not pass on. This
manager adds it to `extra_info` as `ROLLOUT_STEP`, so the reward's record of the call
(`engine.judge.reward.REWARD_RECORDS`) carries the step. verl's legacy trainer hands the agent
loop no step: its calls' records then have none.

`reward.reward_manager` names it with `source=importlib` (`engine.train.verl_overrides`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

from engine.judge.reward import ROLLOUT_STEP

STEP_FIELD = "global_steps"  # the rollout's field verl's v1 trainer sets from its step


class RewardManager(NaiveRewardManager):
    async def run_single(self, data: DataProto) -> dict[str, Any]:
        return await super().run_single(with_step(data))


def with_step(data: DataProto) -> DataProto:
    """`data` with each row's `extra_info` (a copy) carrying its rollout's step, where it has one."""
    steps = data.non_tensor_batch.get(STEP_FIELD)
    if steps is None:
        return data
    infos = data.non_tensor_batch.get("extra_info")
    rows = []
    for i, step in enumerate(steps):
        info = dict(infos[i] or {}) if infos is not None else {}
        info[ROLLOUT_STEP] = int(step)
        rows.append(info)
    extra = np.empty(len(rows), dtype=object)  # one dict a row (np.array would look inside them)
    extra[:] = rows
    data.non_tensor_batch["extra_info"] = extra
    return data
