"""How a trl phase is launched on the GPUs it is given.

On a CPU or one GPU the phase is one Python process. On k GPUs it is k processes under
`accelerate launch`, one per GPU: DDP (a whole model copy per GPU, gradients all-reduced) when a
copy with its gradients and optimizer state fits one GPU, else FSDP (parameters, gradients and
optimizer state sharded across the k GPUs). The rule counts 16 bytes per parameter (bf16
weights and gradients, fp32 Adam moments and master weights) against half of an 80 GB GPU, the
other half left to activations: DDP up to 2.5 B parameters, FSDP above, and FSDP when the size
is unknown (it fits where DDP fits, DDP does not where FSDP does).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

BYTES_PER_PARAM = 16
GPU_BYTES = 80e9
DDP_SHARE = 0.5
PORTS = (20000, 40000)  # each run its own rendezvous port, so runs side by side on one node never meet


@dataclass(frozen=True)
class Launch:
    processes: int
    strategy: str  # ddp | fsdp
    why: str
    args: tuple[str, ...]  # accelerate launch's options


def accelerate_launch(gpus: int, params_b: Optional[float], run_id: str) -> Optional[Launch]:
    """The accelerate options for a phase on `gpus` GPUs (None: one plain process)."""
    if gpus <= 1:
        return None
    if params_b is not None and params_b * 1e9 * BYTES_PER_PARAM <= DDP_SHARE * GPU_BYTES:
        strategy, why = "ddp", f"{params_b:g} B parameters: a copy with its optimizer state fits one GPU"
        sharding: tuple[str, ...] = ("--multi_gpu",)
    else:
        size = f"{params_b:g} B parameters" if params_b is not None else "a model of unknown size"
        strategy, why = "fsdp", f"{size}: weights, gradients and optimizer state sharded over the GPUs"
        sharding = ("--use_fsdp", "--fsdp_version", "1", "--fsdp_sharding_strategy", "FULL_SHARD",
                    "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP", "--fsdp_state_dict_type", "FULL_STATE_DICT",
                    "--fsdp_use_orig_params", "true", "--fsdp_cpu_ram_efficient_loading", "true",
                    "--fsdp_sync_module_states", "true")
    port = PORTS[0] + int(run_id[:8], 16) % (PORTS[1] - PORTS[0])
    args = ("--num_processes", str(gpus), "--num_machines", "1", "--mixed_precision", "bf16",
            "--main_process_port", str(port), *sharding)
    return Launch(processes=gpus, strategy=strategy, why=why, args=args)


def params_b_of(models: dict[str, Any], base_model: Any) -> Optional[float]:
    """Billions of parameters of the base model: as spelled out (`params_b:`), else its registry
    entry's (by name or hub id), else counted in a local folder's weight files; None when unknown."""
    if getattr(base_model, "params_b", None):
        return float(base_model.params_b)
    path = getattr(base_model, "path", base_model)
    for name, entry in models.items():
        if name == path or getattr(entry, "hf_id", None) == path:
            return getattr(entry, "params_b", None)
    folder = Path(str(path)).expanduser()
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    counts = [safetensors_params(f) for f in files]
    if not files or None in counts:
        return None
    return sum(counts) / 1e9 or None


def safetensors_params(path: Path) -> Optional[int]:
    """The parameters a .safetensors file holds, from its header (an 8-byte little-endian length, then
    JSON giving each tensor's dtype and shape): the sum of the shapes' products, whatever the dtype
    (a file's bytes would count fp32 weights twice). None for a file that is not safetensors."""
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > 100 * 2**20:  # headers are kilobytes; a larger length is not a header
                return None
            header = json.loads(f.read(length))
        return sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")
    except (OSError, struct.error, ValueError, TypeError, KeyError, AttributeError):
        return None
