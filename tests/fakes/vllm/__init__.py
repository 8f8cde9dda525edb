"""A FAKE vLLM (vllm cannot run without a GPU): the slice of vLLM's offline API the vllm backend
uses (`LLM`, its `llm_engine` with add_request / step / abort_request, `SamplingParams`),
answering with canned text. It records the call shapes a test checks, one JSON line per event
in $FAKE_VLLM_LOG: each engine load (model, tensor_parallel_size, gpu_memory_utilization, the
CUDA_VISIBLE_DEVICES it saw, its process id), each request added (its prompt), each step
(requests running and waiting), each abort. A request takes 1-4 steps (from its prompt's hash); a step runs up to max_num_seqs
requests and may sleep $FAKE_VLLM_STEP_S seconds.

Put tests/fakes on sys.path (or PYTHONPATH, for the processes a test starts) to import it as `vllm`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Optional

FAKE = True
ANSWER = "```python\ndef solve():\n    return 0\n```"


def _log(event: dict[str, Any]) -> None:
    path = os.environ.get("FAKE_VLLM_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({**event, "pid": os.getpid(), "t": time.time()}) + "\n")


class SamplingParams:
    def __init__(self, **fields: Any) -> None:
        self.fields = fields
        self.n = fields.get("n", 1)
        self.max_tokens = fields.get("max_tokens", 16)


@dataclass
class CompletionOutput:
    text: str
    token_ids: list[int]
    finish_reason: str


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool


@dataclass
class _Request:
    id: str
    prompt: str
    params: SamplingParams
    steps_left: int


@dataclass
class _Engine:
    max_num_seqs: int
    waiting: list[_Request] = field(default_factory=list)
    running: list[_Request] = field(default_factory=list)

    def add_request(self, request_id: str, prompt: Any, params: SamplingParams, **_: Any) -> None:
        assert isinstance(prompt, str), "the fake takes text prompts"
        _log({"event": "add", "prompt": prompt})
        steps = 1 + int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % 4
        self.waiting.append(_Request(request_id, prompt, params, steps))

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def step(self) -> list[RequestOutput]:
        while self.waiting and len(self.running) < self.max_num_seqs:
            self.running.append(self.waiting.pop(0))
        _log({"event": "step", "running": len(self.running), "waiting": len(self.waiting)})
        delay = float(os.environ.get("FAKE_VLLM_STEP_S", "0") or 0)
        if delay:
            time.sleep(delay)
        out = []
        for request in list(self.running):
            request.steps_left -= 1
            if request.steps_left == 0:
                self.running.remove(request)
                tokens = list(range(min(8, request.params.max_tokens)))
                out.append(RequestOutput(request.id, list(range(len(request.prompt.split()))),
                                         [CompletionOutput(ANSWER, tokens, "stop") for _ in range(request.params.n)],
                                         finished=True))
        return out

    def abort_request(self, request_ids: list[str]) -> None:
        _log({"event": "abort", "requests": len(request_ids)})
        gone = set(request_ids)
        self.waiting = [r for r in self.waiting if r.id not in gone]
        self.running = [r for r in self.running if r.id not in gone]


class _Tokenizer:
    def apply_chat_template(self, messages: list[dict[str, str]], *, tokenize: bool = False,
                            add_generation_prompt: bool = True) -> str:
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


class LLM:
    def __init__(self, *, model: str, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 max_num_seqs: Optional[int] = None, **options: Any) -> None:
        _log({"event": "load", "model": model, "tensor_parallel_size": tensor_parallel_size,
              "gpu_memory_utilization": gpu_memory_utilization,
              "devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "options": sorted(options)})
        self.llm_engine = _Engine(max_num_seqs or 256)

    def get_tokenizer(self) -> _Tokenizer:
        return _Tokenizer()


def events(path: str) -> list[dict[str, Any]]:
    """The events a test's fake engines logged."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]
