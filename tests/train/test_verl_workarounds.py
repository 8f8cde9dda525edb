"""rlvr-run's verl plug-in against the installed verl: each workaround of verl internals
(engine/train/verl_plugin/workarounds.py) still meets what it works around, in the shape read
from verl 0.9.1, and the plug-in, loaded through verl's own hook, gives a CPU platform and the
`rlvr_hf` rollout. A verl upgrade that moves any of it fails here, not in a study."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[2]


# Importing the plug-in applies it to this process (and sets Ray's resources in its environment):
# the shapes are read from a pristine verl here, the plug-in is loaded in a subprocess only.
WORKAROUNDS = ROOT / "engine" / "train" / "verl_plugin" / "workarounds.py"


def test_the_workarounds_were_read_from_the_installed_verl() -> None:
    tree = ast.parse(WORKAROUNDS.read_text(encoding="utf-8"))
    [VERL_VERSION] = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
                      and [getattr(t, "id", None) for t in node.targets] == ["VERL_VERSION"]]
    assert version("verl") == VERL_VERSION, (
        f"verl {version('verl')} is installed; engine/train/verl_plugin/workarounds.py was read from "
        f"{VERL_VERSION}: re-read each workaround against the new verl, then update VERL_VERSION")


def test_verl_still_builds_a_duplicate_cpu_backend_string() -> None:
    """gloo_process_group: both initializers still ask for `cpu:gloo,{device}:{backend}`."""
    from verl.utils import distributed

    for name in ("initialize_global_process_group", "initialize_global_process_group_ray"):
        source = inspect.getsource(getattr(distributed, name))
        assert 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in source, name
    assert list(inspect.signature(distributed.initialize_global_process_group).parameters) == ["timeout_second"]
    assert list(inspect.signature(distributed.initialize_global_process_group_ray).parameters) == [
        "timeout_second", "backend"]


def test_verl_still_registers_its_fsdp_engines_for_accelerators_only() -> None:
    """engine_device_lookup and unpinned_offload: the registry's lookup reads VERL_ENGINE_DEVICE, the
    FSDP engine is registered for cuda (not cpu) and pins its forward-only models' offload."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl

    lookup = inspect.getsource(EngineRegistry.get_engine_cls)
    assert 'os.getenv("VERL_ENGINE_DEVICE")' in lookup
    assert list(inspect.signature(EngineRegistry.get_engine_cls).parameters) == ["model_type", "backend"]
    registry = EngineRegistry._engines["language_model"]["fsdp2"]
    assert "cuda" in registry and "cpu" not in registry
    assert "CPUOffloadPolicy(pin_memory=True)" in inspect.getsource(transformer_impl.FSDPEngine)


def test_verl_still_counts_only_accelerators_and_starts_ray_with_the_cores() -> None:
    """ray_resources: the resource check counts GPU/NPU only; main_ppo's Ray gets no CPU count."""
    from verl.single_controller.ray.base import ResourcePoolManager

    from engine.train.verl_compose import composed

    check = inspect.getsource(ResourcePoolManager._check_resource_available)
    assert '"GPU"' in check and '"NPU"' in check and '"CPU"' not in check
    config = composed("ppo_trainer", ())
    assert config.ray_kwargs.ray_init.num_cpus is None


def test_verl_still_leaves_trainer_device_alone_on_a_cpu_platform() -> None:
    """auto_device: verl's auto_set_device skips a platform named cpu."""
    from verl.utils.device import auto_set_device

    assert 'detected != "cpu"' in inspect.getsource(auto_set_device)


PROBE = """
import json, torch.distributed
import verl
from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device
from verl.utils.distributed import initialize_global_process_group_ray
from verl.workers.engine.base import EngineRegistry
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.replica import RolloutReplicaRegistry
initialize_global_process_group_ray()
engine = EngineRegistry.get_engine_cls("language_model", "fsdp2")
import sys
policy = sys.modules[engine.__module__].CPUOffloadPolicy()
print(json.dumps({"device": get_device_name(), "backend": get_nccl_backend(),
                  "group": torch.distributed.get_backend(), "engine": engine.__name__, "pinned": policy.pin_memory,
                  "adapter": get_rollout_class("rlvr_hf").__module__,
                  "replica": RolloutReplicaRegistry.get("rlvr_hf").__name__,
                  "free_memory": get_torch_device().mem_get_info()[0] > 0,
                  "ray_resources": json.loads(__import__("os").environ["RAY_OVERRIDE_RESOURCES"])}))
"""


@pytest.mark.slow  # a subprocess importing verl and torch: ~30-90 s on 2 shared cores
def test_the_plugin_loaded_by_verls_hook_gives_a_cpu_platform_and_the_hf_rollout() -> None:
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "engine.train.verl_plugin", "PYTHONPATH": str(ROOT),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29517", "RANK": "0", "WORLD_SIZE": "1"}
    env.pop("RAY_OVERRIDE_RESOURCES", None)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    assert probe == {"device": "cpu", "backend": "gloo", "group": "gloo", "engine": "FSDPEngineWithLMHead",
                     "pinned": False, "adapter": "engine.train.verl_plugin.adapter", "replica": "HFReplica",
                     "free_memory": True, "ray_resources": probe["ray_resources"]}
    assert probe["ray_resources"]["CPU"] >= 16 and probe["ray_resources"]["GPU"] >= 1
