"""verl's platform for a machine without an accelerator: device `cpu`, collectives over gloo,
one Ray `GPU` slot per core for its ranks.

verl 0.9.1 registers `nvidia`, `huawei` and `amd` and, finding none, falls back to `nvidia`
(so `cuda` and NCCL). Registered after them, `cpu` is what auto-detection picks when none of
them answers; `VERL_PLATFORM=cpu` picks it explicitly.
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any, Optional

import psutil
import torch
from verl.plugin.platform.platform_base import PlatformBase

CPU_PLATFORM = "cpu"


class _CPUDevice:
    """`torch.cpu` with the `torch.cuda` calls verl makes on its device module answered for a
    CPU: memory figures from the host, RNG from torch's default generator, the rest no-ops."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def current_device(self) -> str:
        return CPU_PLATFORM

    def set_device(self, _device: Any) -> None:
        return None

    def get_device_name(self, _device: Any = None) -> str:
        return CPU_PLATFORM

    def synchronize(self, _device: Any = None) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def mem_get_info(self, _device: Any = None) -> tuple[int, int]:
        memory = psutil.virtual_memory()
        return memory.available, memory.total

    def memory_allocated(self, _device: Any = None) -> int:
        return 0

    max_memory_allocated = memory_reserved = max_memory_reserved = memory_allocated

    def reset_peak_memory_stats(self, _device: Any = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def get_rng_state(self, _device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, _device: Any = None) -> None:
        torch.set_rng_state(state)


CPU_DEVICE = _CPUDevice()


class PlatformCPU(PlatformBase):
    @property
    def device_name(self) -> str:
        return CPU_PLATFORM

    @property
    def vendor_name(self) -> str:
        return CPU_PLATFORM

    @property
    def device_module(self) -> ModuleType:
        return CPU_DEVICE  # type: ignore[return-value]  # duck-typed: verl calls attributes only

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return True  # the last registered: reached only when no accelerator answered

    def current_device(self) -> str:  # type: ignore[override]
        # verl moves tensors with `.to(get_device_id())`: an int would mean cuda:N.
        return CPU_PLATFORM

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets for a `GPU` slot; a CPU build of torch ignores it

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        # A rank's slot: verl counts and places ranks by Ray's accelerator resource; the CPU
        # platform's node declares one `GPU` slot per core (`workarounds.ray_resources`).
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
