"""How the `rlvr_hf` rollout samples: a request's parameters as one batched `generate` call shares
them (`_Sampling`, vLLM's semantics), and each row's own draw (`_RowSampler`, seeded by `row_seed`)
so that a sample depends on its request, never on its batch (see `server`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Optional

import torch
from verl.workers.config import RolloutConfig

SAMPLING_EPS = 1e-5  # vLLM's: a temperature below it is greedy


@dataclass(frozen=True)
class _Sampling:
    """The parameters one batched `generate` call shares."""

    do_sample: bool
    temperature: float
    top_p: float
    top_k: Optional[int]
    repetition_penalty: float
    logprobs: bool
    max_new_tokens: int

    # Prompts of different lengths share a call only when padding cannot change an answer:
    # transformers' repetition penalty counts the pad tokens of a left-padded row.
    width: Optional[int] = None

    @classmethod
    def of(cls, params: dict[str, Any], config: RolloutConfig, max_new_tokens: int,
           prompt_len: Optional[int] = None) -> "_Sampling":
        params = dict(params)
        # vLLM's server takes an explicit budget (a tool agent loop's) over the derived one.
        asked = params.pop("max_tokens", params.pop("max_new_tokens", None))
        if asked is not None:
            max_new_tokens = max(1, min(int(asked), max_new_tokens))
        temperature = float(params.pop("temperature", config.temperature))
        top_p = float(params.pop("top_p", config.top_p))
        top_k = int(params.pop("top_k", config.top_k))
        penalty = float(params.pop("repetition_penalty", config.repetition_penalty))
        logprobs = params.pop("logprobs", False)
        # Greedy as vLLM's: temperature 0 (verl's val_kwargs); the agent loop sends no do_sample and
        # vLLM ignores `rollout.do_sample`, so only a request's own do_sample false also means greedy.
        do_sample = bool(params.pop("do_sample", True)) and temperature >= SAMPLING_EPS
        params.pop("seed", None)
        if params:
            raise ValueError(f"the rlvr_hf rollout does not take sampling parameter(s) {sorted(params)}")
        sampling = cls(do_sample=do_sample, temperature=temperature if do_sample else 1.0,
                       top_p=top_p if do_sample else 1.0, top_k=top_k if do_sample and top_k > 0 else None,
                       repetition_penalty=penalty, logprobs=bool(logprobs), max_new_tokens=max_new_tokens,
                       width=prompt_len if penalty != 1.0 else None)
        return sampling


def prompt_key(prompt_ids: list[int]) -> str:
    return hashlib.sha256(json.dumps(prompt_ids).encode()).hexdigest()


def row_seed(seed: int, replica: int, global_steps: Optional[int], prompt: str, occurrence: int) -> int:
    """The seed of one request's generator: the `occurrence`-th request of a prompt (`prompt_key`)
    in a step on a replica draws the same in every run."""
    text = f"{seed}|{replica}|{global_steps}|{prompt}|{occurrence}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little")


class _RowSampler:
    """The sampling of a batch as one logits processor under greedy decoding: the warpers of a
    sampled `generate` (temperature, top-k, top-p, in transformers' order), then Gumbel noise from
    each row's own generator; the argmax of log p + Gumbel is a draw from p (the Gumbel-max trick),
    so a row's tokens depend on its seed and its own logits alone. It keeps each step's warped
    log-probs: the processed log-probs vLLM returns."""

    def __init__(self, sampling: _Sampling, seeds: list[int], device: str, keep: bool) -> None:
        from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

        self.warpers: list[Any] = []
        if sampling.temperature != 1.0:
            self.warpers.append(TemperatureLogitsWarper(sampling.temperature))
        if sampling.top_k:
            self.warpers.append(TopKLogitsWarper(top_k=sampling.top_k))
        if sampling.top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(top_p=sampling.top_p))
        self.generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
        self.device, self.keep = device, keep
        self.log_probs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for warper in self.warpers:
            scores = warper(input_ids, scores)
        log_p = torch.log_softmax(scores.float(), -1)
        if self.keep:
            self.log_probs.append(log_p)
        tiny = torch.finfo(torch.float32).tiny
        uniform = torch.stack([torch.rand(scores.shape[-1], generator=g, device=self.device) for g in self.generators])
        return log_p - torch.log(-torch.log(uniform.clamp_min(tiny)))
