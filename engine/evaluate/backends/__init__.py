"""Generation backends behind one interface, chosen by name (`GENERATORS`), imported on first use,
and how many engines of which shape a run's devices get (`open_generator`)."""

from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from engine.errors import UserError
from engine.evaluate.backends.base import Backend, Finished, Request
from engine.resources import load_object, visible_gpus

GENERATORS = {
    "hf": "engine.evaluate.backends.hf:HFBackend",
    "vllm": "engine.evaluate.backends.vllm:VLLMBackend",
    "openai": "engine.evaluate.backends.openai:OpenAIBackend",
}
# A model fits one device when its weights take at most this share of the device's memory (the
# rest holds the KV cache, activations and CUDA graphs).
WEIGHTS_SHARE = 0.5
DEFAULT_BATCH_SIZE = {"cpu": 16, "cuda": 64}  # hf prompts per forward batch
DEFAULT_CONCURRENCY = 64  # openai requests in flight


def make_generator(name: str, **options: Any) -> Backend:
    target = GENERATORS.get(name)
    if target is None:
        raise UserError(f"unknown generation backend {name!r}; use one of: {', '.join(GENERATORS)}")
    return load_object(target)(**options)


def default_backend() -> str:
    """vllm on a machine with a GPU and vllm installed, else hf."""
    if importlib.util.find_spec("vllm") is None:
        return "hf"
    import torch

    return "vllm" if torch.cuda.is_available() else "hf"


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """A model served elsewhere (the spec's `endpoint:`); the key is read from `api_key_env` when
    the run starts and is never written anywhere."""

    base_url: str
    model: str
    api_key_env: Optional[str] = None
    concurrency: int = DEFAULT_CONCURRENCY
    fingerprint: Optional[str] = None  # what it must serve, pinned (`backends.openai`: `fingerprint`)

    def api_key(self) -> str:
        if self.api_key_env is None:
            return "EMPTY"
        key = os.environ.get(self.api_key_env)
        if not key:
            raise UserError(f"the endpoint {self.base_url} needs an API key in ${self.api_key_env}, which is not set\n"
                            f"  fix: export {self.api_key_env}=... in the shell that runs rlvr-run")
        return key


@dataclass(frozen=True, kw_only=True)
class GenerationSettings:
    """How an evaluation generates: the spec's `generation:` (None: decided from the devices and
    the model), or an endpoint."""

    backend: str = "auto"  # hf | vllm | auto (vllm where a GPU and vllm exist, else hf)
    batch_size: Optional[int] = None  # hf
    concurrency: Optional[int] = None  # openai requests in flight (an endpoint's own wins)
    tensor_parallel_size: Optional[int] = None  # vllm; the rest of the devices run data-parallel engines
    gpu_memory_utilization: Optional[float] = None  # vllm
    endpoint: Optional[Endpoint] = None


@dataclass(frozen=True, kw_only=True)
class EngineShape:
    """What `open_generator` builds: `engines` copies of `backend`, each on `tensor_parallel_size` devices."""

    backend: str
    engines: int
    tensor_parallel_size: int
    options: dict[str, Any]
    device_groups: tuple[str, ...] = ()  # CUDA_VISIBLE_DEVICES of each engine (data parallel)


def engine_shape(settings: GenerationSettings, model: str, devices: Sequence[str]) -> EngineShape:
    """One engine per device group: tensor parallelism only as wide as the model needs (a model that
    fits one device gets one engine per device, not TP over all of them)."""
    if settings.endpoint is not None:
        e = settings.endpoint
        return EngineShape(backend="openai", engines=1, tensor_parallel_size=1,
                           options={"model": e.model, "base_url": e.base_url, "api_key": e.api_key(),
                                    "concurrency": e.concurrency})
    name = default_backend() if settings.backend == "auto" else settings.backend
    if name == "openai":
        raise UserError("the openai backend needs an endpoint\n"
                        "  fix: declare `endpoint: {base_url: ..., model: ...}` on the eval phase")
    devices = list(devices)
    if name == "hf":
        batch = settings.batch_size or DEFAULT_BATCH_SIZE["cuda" if devices else "cpu"]
        return _data_parallel(name, {"model": model, "batch_size": batch}, devices, 1)
    tp = settings.tensor_parallel_size or tensor_parallel_for(model, len(devices))
    if devices and tp > len(devices):
        raise UserError(f"tensor_parallel_size {tp} needs {tp} GPUs but the evaluation was given {len(devices)}\n"
                        f"  fix: set `resources: {{gpus: {tp}}}` on the evaluation, or a smaller tensor_parallel_size")
    # gpu_memory_utilization unset: each engine takes what is free where it starts (`vllm.memory_share`)
    options = {"model": model, "tensor_parallel_size": tp, "gpu_memory_utilization": settings.gpu_memory_utilization}
    return _data_parallel(name, options, devices, tp)


def _data_parallel(name: str, options: dict[str, Any], devices: list[str], tp: int) -> EngineShape:
    engines = max(1, len(devices) // tp)
    groups = tuple(",".join(devices[i * tp:(i + 1) * tp]) for i in range(engines)) if devices else ()
    return EngineShape(backend=name, engines=engines, tensor_parallel_size=tp, options=options, device_groups=groups)


def open_generator(shape: EngineShape) -> Backend:
    if shape.engines > 1:
        from engine.evaluate.backends.parallel import DataParallel

        return DataParallel(name=shape.backend, target=GENERATORS[shape.backend], options=shape.options,
                            devices=shape.device_groups)
    return make_generator(shape.backend, **shape.options)


def tensor_parallel_for(model: str, gpus: int) -> int:
    """The fewest devices (a power of two, at most `gpus`) whose memory holds the weights with room
    to spare; 1 when the weights' size or the device's memory is unknown."""
    weights, memory = weights_bytes(model), device_memory_bytes()
    tp = 1
    while weights and memory and weights / tp > WEIGHTS_SHARE * memory and tp * 2 <= max(1, gpus):
        tp *= 2
    return tp


def weights_bytes(model: str) -> int:
    root = Path(model)
    if not root.is_dir():
        return 0
    return sum(p.stat().st_size for p in root.iterdir() if p.suffix in (".safetensors", ".bin", ".pt"))


def device_memory_bytes() -> int:
    if importlib.util.find_spec("torch") is None:
        return 0
    import torch

    return int(torch.cuda.get_device_properties(0).total_memory) if torch.cuda.is_available() else 0


class LazyGenerator:
    """The engine(s) of `shape`, loaded on the first request (a resumed run may need none), once
    however many datasets and runs stream through it; `on_load` hears of each load."""

    def __init__(self, shape: EngineShape, on_load: Callable[[EngineShape, float], None] = lambda s, t: None) -> None:
        self.shape, self.on_load = shape, on_load
        self.name = shape.backend
        self.loaded: Optional[Backend] = None

    def stream(self, requests: Sequence[Request]) -> Iterator[Finished]:
        if self.loaded is None:
            began = time.perf_counter()
            self.loaded = open_generator(self.shape)
            self.on_load(self.shape, time.perf_counter() - began)
        return self.loaded.stream(requests)

    def close(self) -> None:
        if self.loaded is not None:
            self.loaded.close()
            self.loaded = None
