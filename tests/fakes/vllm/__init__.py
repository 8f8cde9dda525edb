"""vLLM with a FAKE GPU forward pass: everything else is the real vLLM of the version verl pins.

This package is importable as `vllm` (put tests/fakes on sys.path, or PYTHONPATH for the processes
a test starts) and runs the real vLLM's Python source, unpacked by `tests/fakes/vllm_source.py`
into the folder $RLVR_VLLM_SOURCE names: its `__init__` and every submodule are vLLM's own
(`SamplingParams` and its validation, output kinds, the engine-core request, the parallel-sampling
parent request, the output processor and its detokenizer). Only what needs a GPU (or a model
config, which needs a GPU platform) is faked, and it does what vLLM 0.24 does there, per its source:

- `LLMEngine.add_request` / `step` / `abort_request` (`v1/engine/llm_engine.py`): its fan-out of
  n > 1 into child requests through the real `ParentRequest`, and its steps through the real
  `OutputProcessor` (the module itself imports the structured-output backends, which need
  packages a CPU test does not install);

- `LLM(...)` starts its engine core as a child process, stopped by `shutdown()` or when it is
  collected (`v1/engine/utils.py`): a daemonic caller cannot start it, as with real vLLM;
- the start-up memory check (`v1/worker/utils.py` `request_memory`): the free share of the
  device's memory ($FAKE_VLLM_FREE_SHARE, default 1.0) must be at least gpu_memory_utilization;
- the input processor (`v1/engine/input_processor.py`) takes an engine input (`{"type": "token",
  ...}`) as given and warns of a raw prompt as deprecated, tokenizing it with special tokens
  (`add_special_tokens=True`, as vLLM's completion renderer does); it refuses a prompt of
  max_model_len tokens or more with vLLM's message;
- the engine core answers each request with the tokens of `ANSWER`, a few per step (1-4 steps,
  from the prompt's hash), cut at max_tokens (finish `length`), else finished `stop`;
  `finish_with` makes it end requests with another reason (`abort`, `error`).

Events go to $FAKE_VLLM_LOG, one JSON line each: each engine load (model, options, devices, pid),
each request added (its prompt token ids), each step (running, waiting), each abort, each
shutdown, each deprecation warning.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import time
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

FAKE = True
ANSWER = "```python\ndef solve():\n    return 0\n```"
MAX_MODEL_LEN = 256

_SOURCE = Path(os.environ["RLVR_VLLM_SOURCE"]) / "vllm"
__path__ = [str(_SOURCE)]  # every submodule is the real one
exec(compile((_SOURCE / "__init__.py").read_text(encoding="utf-8"), str(_SOURCE / "__init__.py"), "exec"))

from copy import copy  # noqa: E402

from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils import random_uuid  # noqa: E402
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, FinishReason  # noqa: E402
from vllm.v1.engine.output_processor import OutputProcessor  # noqa: E402
from vllm.v1.engine.parallel_sampling import ParentRequest  # noqa: E402

def _log(event: dict[str, Any]) -> None:
    path = os.environ.get("FAKE_VLLM_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({**event, "pid": os.getpid(), "t": time.time()}) + "\n")


def _engine_core_process(conn: Any) -> None:
    try:
        conn.recv()  # runs until shut down
    except EOFError:
        pass


def _stop(process: Any, conn: Any) -> None:
    if process.is_alive():
        conn.send(None)
        process.join(timeout=10)


class _InputProcessor:
    """The input processor's checks and request building for decoder-only text (its multimodal,
    LoRA and config-driven parts need a model config, which needs a GPU platform)."""

    def __init__(self, tokenizer: Any, max_model_len: int) -> None:
        self.tokenizer, self.max_model_len = tokenizer, max_model_len

    def process_inputs(self, request_id: str, prompt: Any, params: SamplingParams, supported_tasks: Any = (),
                       arrival_time: Optional[float] = None, **_: Any) -> EngineCoreRequest:
        if isinstance(prompt, dict) and "type" in prompt:
            ids = list(prompt["prompt_token_ids"])
        else:
            _log({"event": "warning", "message": "Passing raw prompts to InputProcessor is deprecated"})
            text = prompt if isinstance(prompt, str) else prompt["prompt"]
            ids = list(self.tokenizer(text, add_special_tokens=True)["input_ids"])
        if not ids:
            raise ValueError("The decoder prompt cannot be empty")
        if len(ids) > self.max_model_len:
            raise ValueError(f"The decoder prompt (length {len(ids)}) is longer than the maximum model length of "
                             f"{self.max_model_len}. Make sure that `max_model_len` is no smaller than the number "
                             "of text tokens.")
        if len(ids) == self.max_model_len:
            raise ValueError(f"The decoder prompt (length {len(ids)}) plus the number of requested output tokens "
                             f"(at least 1) is longer than the maximum model length of {self.max_model_len}.")
        sampling = params.clone()
        sampling.update_from_tokenizer(self.tokenizer)
        return EngineCoreRequest(request_id=request_id, prompt_token_ids=ids, mm_features=None,
                                 sampling_params=sampling, pooling_params=None,
                                 arrival_time=arrival_time or time.time(), lora_request=None, cache_salt=None,
                                 data_parallel_rank=None)

    @staticmethod
    def assign_request_id(request: EngineCoreRequest) -> None:
        """`InputProcessor.assign_request_id`: the external id kept, the internal one made unique."""
        request.external_req_id = request.request_id
        request.request_id = f"{request.external_req_id}-{random_uuid():.8}"


class _LLMEngine:
    """`LLMEngine`'s add_request / step / abort_request (v1/engine/llm_engine.py:212-334), for token
    and text prompts, on the real output processor and parent request."""

    def __init__(self, tokenizer: Any, length: int, core: "_EngineCore") -> None:
        self.model_config = SimpleNamespace(max_model_len=length, is_encoder_decoder=False)
        self.input_processor = _InputProcessor(tokenizer, length)
        self.output_processor = OutputProcessor(tokenizer, log_stats=False)
        self.engine_core = core

    def add_request(self, request_id: str, prompt: Any, params: SamplingParams, **options: Any) -> str:
        if not isinstance(request_id, str):
            raise TypeError(f"request_id must be a string, got {type(request_id)}")
        request = self.input_processor.process_inputs(request_id, prompt, params, ("generate",), **options)
        prompt_text = prompt.get("prompt") if isinstance(prompt, dict) else prompt
        self.input_processor.assign_request_id(request)
        params = request.sampling_params
        if params.n == 1:
            self.output_processor.add_request(request, prompt_text, None, 0)
            self.engine_core.add_request(request)
            return request.request_id
        parent = ParentRequest(request)
        for index in range(params.n):
            child_id, child_params = parent.get_child_info(index)
            child = request if index == params.n - 1 else copy(request)
            child.request_id, child.sampling_params = child_id, child_params
            self.output_processor.add_request(child, prompt_text, parent, index)
            self.engine_core.add_request(child)
        return request.request_id

    def has_unfinished_requests(self) -> bool:
        return self.output_processor.has_unfinished_requests()

    def step(self) -> list[Any]:
        outputs = self.engine_core.get_output()
        processed = self.output_processor.process_outputs(outputs.outputs, engine_core_timestamp=outputs.timestamp,
                                                          iteration_stats=None)
        self.engine_core.abort_requests(processed.reqs_to_abort)  # stopped by a stop string
        return processed.request_outputs

    def abort_request(self, request_ids: list[str], internal: bool = False) -> None:
        request_ids = self.output_processor.abort_requests(request_ids, internal)
        self.engine_core.abort_requests(request_ids)


class _EngineCore:
    """The GPU part: schedules up to max_num_seqs requests a step and answers with `ANSWER`."""

    def __init__(self, tokenizer: Any, max_num_seqs: int, process: Any, conn: Any) -> None:
        self.answer = list(tokenizer(ANSWER, add_special_tokens=False)["input_ids"])
        self.max_num_seqs, self.process, self.conn = max_num_seqs, process, conn
        self.waiting: list[EngineCoreRequest] = []
        self.running: dict[str, tuple[EngineCoreRequest, int, int]] = {}  # id: (request, emitted, steps left)
        self.finish_with: Optional[FinishReason] = None
        # as vLLM's process manager: its engine core is stopped when it is collected, or at exit
        self._finalizer = weakref.finalize(self, _stop, process, conn)

    def get_supported_tasks(self) -> tuple[str, ...]:
        return ("generate",)

    def dp_engines_running(self) -> bool:
        return False

    def add_request(self, request: EngineCoreRequest) -> None:
        _log({"event": "add", "prompt_token_ids": list(request.prompt_token_ids),
              "seed": request.sampling_params.seed, "n": request.sampling_params.n})
        self.waiting.append(request)

    def abort_requests(self, request_ids: list[str]) -> None:
        if request_ids:
            _log({"event": "abort", "requests": len(request_ids)})
        gone = set(request_ids)
        self.waiting = [r for r in self.waiting if r.request_id not in gone]
        for request_id in gone:
            self.running.pop(request_id, None)

    def get_output(self) -> EngineCoreOutputs:
        while self.waiting and len(self.running) < self.max_num_seqs:
            request = self.waiting.pop(0)
            steps = 1 + int(hashlib.sha256(repr(request.prompt_token_ids).encode()).hexdigest(), 16) % 4
            self.running[request.request_id] = (request, 0, steps)
        _log({"event": "step", "running": len(self.running), "waiting": len(self.waiting)})
        delay = float(os.environ.get("FAKE_VLLM_STEP_S", "0") or 0)
        if delay:
            time.sleep(delay)
        outputs = []
        for request_id, (request, emitted, steps) in list(self.running.items()):
            limit = min(len(self.answer), request.sampling_params.max_tokens)
            upto = limit if steps == 1 else min(limit, emitted + max(1, limit // steps))
            finish = None
            if upto >= limit:
                finish = self.finish_with or (FinishReason.LENGTH if limit < len(self.answer) else FinishReason.STOP)
                del self.running[request_id]
            else:
                self.running[request_id] = (request, upto, steps - 1)
            outputs.append(EngineCoreOutput(request_id=request_id, new_token_ids=self.answer[emitted:upto],
                                            finish_reason=finish))
        return EngineCoreOutputs(outputs=outputs, timestamp=time.monotonic())

    def shutdown(self) -> None:
        _log({"event": "shutdown"})
        self._finalizer()


class LLM:
    def __init__(self, model: str, *, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.92,
                 max_num_seqs: Optional[int] = None, max_model_len: Optional[int] = None, **options: Any) -> None:
        from transformers import AutoTokenizer

        _log({"event": "load", "model": model, "tensor_parallel_size": tensor_parallel_size,
              "gpu_memory_utilization": gpu_memory_utilization, "options": options,
              "devices": os.environ.get("CUDA_VISIBLE_DEVICES")})
        free = float(os.environ.get("FAKE_VLLM_FREE_SHARE", "1.0"))
        if free < gpu_memory_utilization:
            raise ValueError(f"Free memory on device cuda:0 ({free * 80:.2f}/80.0 GiB) on startup is less than "
                             f"desired GPU memory utilization ({gpu_memory_utilization}, "
                             f"{gpu_memory_utilization * 80:.2f} GiB). Decrease GPU memory utilization or reduce "
                             "GPU memory used by other processes.")
        parent, child = multiprocessing.get_context("fork").Pipe()
        process = multiprocessing.get_context("fork").Process(target=_engine_core_process, args=(child,),
                                                              name="EngineCore")
        process.start()  # what vLLM does: a daemonic caller gets "daemonic processes are not allowed to have children"
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        length = max_model_len or MAX_MODEL_LEN
        engine = _LLMEngine(self.tokenizer, length, _EngineCore(self.tokenizer, max_num_seqs or 256, process, parent))
        self.llm_engine = engine

    def get_tokenizer(self) -> Any:
        return self.tokenizer


def events(path: str) -> list[dict[str, Any]]:
    """The events a test's fake engines logged."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]
