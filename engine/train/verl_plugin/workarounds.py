"""Every change this plug-in makes to verl's internals, in one place. Each was read from verl
0.9.1 (`VERL_VERSION`); `tests/train/test_verl_workarounds.py` checks, against the installed
verl, that what each one works around is still there in the shape read, so an upgrade that
moves it fails a test instead of a study.

They apply only on the CPU platform (`apply_on_cpu`): on a GPU machine the plug-in only adds
the rollout, and verl runs as released.
"""

from __future__ import annotations

import functools
import json
import os
from datetime import timedelta
from typing import Any

VERL_VERSION = "0.9.1"
_APPLIED = "_rlvr_cpu_workaround"


def on_cpu() -> bool:
    from verl.plugin.platform import get_platform

    return get_platform().device_name == "cpu"


def apply_on_cpu() -> None:
    """Applied when the plug-in is imported, in each verl process, before verl builds anything."""
    if not on_cpu():
        return
    ray_resources()
    trainer_device()
    engine_device_lookup()
    gloo_process_group()
    unpinned_offload()


# Ray actors verl 0.9.1's PPO trainer starts besides its workers, one logical CPU each: the task
# runner, TransferQueue's controller and `transfer_queue.backend.SimpleStorage.num_data_storage_units`
# (8) storage units, the agent loop and reward loop workers. Sized for a GPU node's cores.
LOGICAL_CPUS = 64


def ray_resources() -> None:
    """Two of verl 0.9.1's assumptions about a Ray node, met by declaring the local node's resources
    (`RAY_OVERRIDE_RESOURCES`, Ray's own setting, read when `main_ppo` starts its local Ray; one the
    user set is kept):

    - it starts more single-CPU actors than a laptop has cores (`LOGICAL_CPUS`), and with
      `ray_kwargs.ray_init.num_cpus: null` Ray has only the cores: placement then waits forever,
      silently, after the config is printed. Ray's CPUs are a scheduling count, not threads.
    - it places training ranks on Ray's accelerator resource and counts only `GPU`/`NPU` before it
      starts (`ResourcePoolManager._check_resource_available`: "Total available GPUs 0"). The CPU
      platform names `GPU` as its Ray resource, and the node declares one slot per core: each
      slot is one gloo rank of the FSDP engine (`trainer.n_gpus_per_node` of them). Ray refuses
      `GPU` slots while `CUDA_VISIBLE_DEVICES` is empty, which is how a scheduler gives a run no
      GPU: on this platform nothing reads it, so an empty one is dropped."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        del os.environ["CUDA_VISIBLE_DEVICES"]
    os.environ.setdefault("RAY_OVERRIDE_RESOURCES",
                          json.dumps({"CPU": LOGICAL_CPUS, "GPU": max(1, len(os.sched_getaffinity(0)))}))


def trainer_device() -> None:
    """verl 0.9.1's `verl.utils.device.auto_set_device` sets `trainer.device` to the detected
    platform's device, except when that is `cpu`: then the config's default `cuda` stays, and the
    SFT trainer moves its batches to it (`SFTTrainer.device_name`). On the CPU platform the
    trainers' device is the CPU."""
    from verl.utils import device

    if getattr(device.auto_set_device, _APPLIED, False):
        return
    original = device.auto_set_device

    @functools.wraps(original)
    def auto_set_device(config: Any) -> None:
        original(config)
        if config is not None and hasattr(config, "trainer") and hasattr(config.trainer, "device"):
            config.trainer.device = "cpu"

    setattr(auto_set_device, _APPLIED, True)
    device.auto_set_device = auto_set_device


def engine_device_lookup() -> None:
    """verl 0.9.1 registers its FSDP engines for devices `cuda` and `npu` only
    (`workers/engine/fsdp/transformer_impl.py`, `EngineRegistry.register(..., device=["cuda","npu"])`),
    and `EngineRegistry.get_engine_cls` looks them up by the platform's device name; it reads
    `VERL_ENGINE_DEVICE` first. The FSDP engine itself runs on any torch device: look it up as `cuda`."""
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")


def gloo_process_group() -> None:
    """verl 0.9.1's `verl.utils.distributed.initialize_global_process_group` (torchrun: the SFT
    trainer) and `initialize_global_process_group_ray` (the PPO workers) ask torch for the backend
    `cpu:gloo,{device}:{backend}`, which on device `cpu` names `cpu` twice and torch refuses
    ("Duplicate device type cpu in backend string"). On a CPU the one backend is gloo."""
    import torch.distributed
    from verl.utils import distributed

    if getattr(distributed.initialize_global_process_group, _APPLIED, False):
        return

    @functools.wraps(distributed.initialize_global_process_group)
    def initialize_global_process_group(timeout_second: int = 36000) -> tuple[int, int, int]:
        torch.distributed.init_process_group(backend="gloo", timeout=timedelta(seconds=timeout_second),
                                             init_method=os.environ.get("DIST_INIT_METHOD", None))
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    original_ray = distributed.initialize_global_process_group_ray

    @functools.wraps(original_ray)
    def initialize_global_process_group_ray(timeout_second: Any = None, backend: Any = None) -> None:
        original_ray(timeout_second=timeout_second, backend="gloo")

    for patched in (initialize_global_process_group, initialize_global_process_group_ray):
        setattr(patched, _APPLIED, True)
    distributed.initialize_global_process_group = initialize_global_process_group
    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray


def unpinned_offload() -> None:
    """verl 0.9.1's FSDP2 engine wraps every forward-only model (the reference policy of a KL
    loss) in `CPUOffloadPolicy(pin_memory=True)` (`FSDPEngine._build_fsdp_module`), and pinning
    memory needs an accelerator. On a CPU the model is already in host memory: the same policy,
    unpinned. The engine module binds the name at its import, so it is replaced there, lazily:
    when verl first looks an engine up (`EngineRegistry.get_engine_cls`), the module is loaded."""
    from verl.workers.engine.base import EngineRegistry

    lookup = EngineRegistry.get_engine_cls.__func__
    if getattr(lookup, _APPLIED, False):
        return

    @functools.wraps(lookup)
    def get_engine_cls(cls: Any, model_type: str, backend: str) -> Any:
        engine = lookup(cls, model_type, backend)
        import sys

        module = sys.modules[engine.__module__]
        policy = getattr(module, "CPUOffloadPolicy", None)
        if policy is not None and not getattr(policy, _APPLIED, False):
            module.CPUOffloadPolicy = _unpinned(policy)
        return engine

    setattr(get_engine_cls, _APPLIED, True)
    EngineRegistry.get_engine_cls = classmethod(get_engine_cls)


def _unpinned(policy: type) -> type:
    class UnpinnedCPUOffloadPolicy(policy):  # type: ignore[misc, valid-type]
        def __init__(self, pin_memory: bool = True) -> None:
            super().__init__(pin_memory=False)

    setattr(UnpinnedCPUOffloadPolicy, _APPLIED, True)
    return UnpinnedCPUOffloadPolicy
