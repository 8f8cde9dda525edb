"""rlvr-run's verl plug-in: a transformers rollout (`rlvr_hf`) and a CPU platform, registered
through verl's documented hook.

verl imports every module named in `VERL_USE_EXTERNAL_MODULES` in each of its processes (the
driver, the task runner, every Ray worker), before it builds anything; the launch script of a
run that asks for no GPU names this package there. Importing it registers:

- the rollout `rlvr_hf` (`actor_rollout_ref.rollout.name=rlvr_hf`): generation with
  `transformers` on the worker's device, for machines without vLLM / SGLang / TRT-LLM
  (`server`, `adapter`);
- the platform `cpu` (`platform`), which verl's auto-detection picks only when no accelerator
  answers first; and, on it, the workarounds of verl internals a CPU needs (`workarounds`).
"""

from __future__ import annotations

from verl.plugin.platform.platform_manager import PlatformRegistry
from verl.workers.rollout.base import _ROLLOUT_REGISTRY
from verl.workers.rollout.replica import RolloutReplicaRegistry

from engine.train.verl_overrides import CPU_ROLLOUT as ROLLOUT_NAME
from engine.train.verl_plugin.platform import CPU_PLATFORM, PlatformCPU
from engine.train.verl_plugin.workarounds import apply_on_cpu


def _replica() -> type:
    from engine.train.verl_plugin.server import HFReplica

    return HFReplica


PlatformRegistry.register(platform=CPU_PLATFORM)(PlatformCPU)
RolloutReplicaRegistry.register(ROLLOUT_NAME, _replica)
_ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = "engine.train.verl_plugin.adapter.ServerAdapter"
apply_on_cpu()
