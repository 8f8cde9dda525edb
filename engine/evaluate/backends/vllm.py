"""vLLM's offline engine (GPU): every request of a dataset submitted at once, each request's samples
yielded the step they finish.

`LLM.generate` returns only when the last sequence ends, so a kill would lose the whole dataset;
instead the requests go to the engine under `LLM` (`add_request`, then `step` until none is
left) and the caller writes each finished request while the engine keeps its batch full with the
rest. What `LLM.generate` does besides, this does too, or a GPU run would be wrong:

- requests ask for the final output only (`RequestOutputKind.FINAL_ONLY`): the engine's default
  streams each of n samples on its own, and the one finished output of a request would hold the
  last sample alone;
- prompts go in as token ids (vLLM's engine input, not a raw prompt it tokenizes again): a chat
  prompt is its template's rendering, tokenized without special tokens (the template writes
  them), a plain prompt with them, as hf, the vLLM server and `LLM.chat` tokenize;
- greedy decoding is asked once and repeated for its n samples (vLLM refuses greedy with n > 1,
  and the n samples would be the same);
- a prompt too long for the model, and a request the engine ends with `abort` or `error`, give
  that request's samples an explicit error (a GEN_ERROR fault), never a failed group or a
  wrong answer.

Engines of one architecture share one compile cache (`compile_cache_dir`): vLLM keys its cache by
the model's path, so every checkpoint would otherwise compile from scratch.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from engine.errors import UserError
from engine.evaluate.backends.base import (
    Decoding,
    Finished,
    Generation,
    Prompt,
    Request,
    failed,
    once_if_greedy,
    prompt_share,
)

DEFAULT_MEMORY_SHARE = 0.9
FREE_MARGIN = 0.03  # what else may allocate between the measurement and vLLM's own
MIN_MEMORY_SHARE = 0.2  # less holds the weights of no model worth an engine, and barely a KV cache
COMPILE_CACHE_ENV = "RLVR_VLLM_COMPILE_CACHE"  # where compiled graphs are kept (default ~/.cache/rlvr-run)


class VLLMBackend:
    name = "vllm"

    def __init__(self, *, model: str, tensor_parallel_size: int = 1, gpu_memory_utilization: Optional[float] = None,
                 max_num_seqs: Optional[int] = None) -> None:
        try:
            import vllm
            from vllm import LLM
        except ImportError:
            raise UserError("the vllm backend needs vllm, which is not installed here\n"
                            "  fix: on a GPU machine install the gpu extra (pip install -e '.[gpu]'), "
                            "or choose `backend: hf` or an `endpoint:` for this evaluation") from None
        options: dict[str, Any] = {"model": model, "tensor_parallel_size": tensor_parallel_size,
                                   "gpu_memory_utilization": memory_share(gpu_memory_utilization, free_share())}
        if max_num_seqs:
            options["max_num_seqs"] = max_num_seqs
        cache = compile_cache_dir(model, vllm.__version__, options)
        if cache is not None:
            options["compilation_config"] = {"cache_dir": str(cache)}
        self.engine = f"vllm {vllm.__version__}"
        self.llm = LLM(**options)
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self._submitted = 0  # request ids stay unique across calls on one engine

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
        text = self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def stream(self, requests: Sequence[Request]) -> Iterator[Finished]:
        from vllm.inputs import tokens_input

        engine = self.llm.llm_engine
        first, self._submitted = self._submitted, self._submitted + len(requests)
        pending: dict[str, int] = {}
        refused: list[Finished] = []
        began = time.perf_counter()
        try:
            for i, request in enumerate(requests):
                ids = self.prompt_ids(request.prompt)
                if len(ids) >= self.max_model_len:  # vLLM raises on it: this request fails, not the dataset
                    refused.append((i, failed(request.decoding, f"the prompt is {len(ids)} tokens; the model's "
                                                                f"context (max_model_len) is {self.max_model_len}",
                                              engine=self.engine)))
                    continue
                asked = once_if_greedy(request.decoding)
                try:
                    engine.add_request(f"r{first + i}", tokens_input(ids), _params(asked))
                except ValueError as exc:  # vLLM's own refusal of this one request
                    refused.append((i, failed(request.decoding, f"vLLM refused the request: {exc}",
                                              engine=self.engine)))
                    continue
                pending[f"r{first + i}"] = i
            yield from refused
            while pending:
                for out in engine.step():
                    if out.finished and out.request_id in pending:
                        index = pending.pop(out.request_id)
                        yield index, _generations(out, requests[index].decoding, time.perf_counter() - began,
                                                  self.engine)
        finally:
            if pending:  # the caller stopped early: the engine drops what it still holds
                engine.abort_request(list(pending))

    def close(self) -> None:
        """Shut the engine down and give its GPU memory back now: a trainer may follow in this process,
        and vLLM's engine core keeps its memory until it is shut down, whatever the references."""
        if self.llm is None:
            return
        core = getattr(self.llm.llm_engine, "engine_core", None)
        if core is not None:
            core.shutdown()
        self.llm = None
        gc.collect()
        try:
            import torch
        except ImportError:
            return
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def free_share() -> float:
    """The share of this process's first GPU's memory free now (1.0 where none can be asked)."""
    try:
        import torch
    except ImportError:
        return 1.0
    if not torch.cuda.is_available():
        return 1.0
    free, total = torch.cuda.mem_get_info()
    return free / total


def memory_share(declared: Optional[float], free: float) -> float:
    """The gpu_memory_utilization to start vLLM with. vLLM refuses to start unless that share of the
    GPU's memory is free; beside a live trainer (early stopping scores while training) it is not.
    Undeclared: the default, or what is free with a margin; declared: as declared, refused here with
    the free share named when vLLM would refuse it."""
    if declared is None:
        share = min(DEFAULT_MEMORY_SHARE, free - FREE_MARGIN)
        if share < MIN_MEMORY_SHARE:
            raise UserError(f"only {free:.0%} of the GPU's memory is free: too little for a vLLM engine "
                            "(another process, a trainer beside it, holds the rest)\n"
                            "  fix: free the GPU, or score after training (drop early stopping)")
        return round(share, 3)
    if declared > free:
        raise UserError(f"gpu_memory_utilization {declared} asks for more of the GPU than is free ({free:.0%}); "
                        "vLLM refuses to start\n  fix: lower `generation.gpu_memory_utilization` or leave it unset "
                        "(then the free share is used)")
    return declared


def _params(decoding: Decoding) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(n=decoding.n, temperature=decoding.temperature, top_p=decoding.top_p,
                          top_k=decoding.top_k, max_tokens=decoding.max_tokens, stop=list(decoding.stop) or None,
                          seed=decoding.seed, repetition_penalty=1.0, min_p=0.0,
                          output_kind=RequestOutputKind.FINAL_ONLY)


def _generations(out: Any, decoding: Decoding, latency: float, engine: str) -> list[Generation]:
    prompt = len(out.prompt_token_ids)
    if decoding.greedy and decoding.n > 1 and len(out.outputs) == 1:  # asked once: the n samples are alike
        outputs = list(out.outputs) * decoding.n
    else:
        outputs = sorted(out.outputs, key=lambda c: c.index)
    if len(outputs) != decoding.n:
        return failed(decoding, f"vLLM returned {len(outputs)} samples for n={decoding.n}", engine=engine)
    gens = []
    for j, c in enumerate(outputs):
        reason = str(c.finish_reason)
        fault = None if reason in ("stop", "length") else f"vLLM finished the sample with {reason!r}"
        gens.append(Generation(text=c.text if fault is None else "", prompt_tokens=prompt_share(prompt, decoding.n, j),
                               completion_tokens=len(c.token_ids), finish_reason="error" if fault else reason,
                               latency_s=latency, seed=decoding.seed + (0 if decoding.greedy else j), error=fault,
                               engine=engine))
    return gens


def compile_cache_dir(model: str, version: str, options: dict[str, Any]) -> Optional[Path]:
    """One compile cache per architecture, engine shape and vLLM version: the checkpoints of one
    training run (same config.json but for their names) reuse one another's compiled graphs. None
    when the model is not a local folder with a config.json (vLLM's own cache then)."""
    config = Path(model) / "config.json"
    if not config.is_file():
        return None
    arch = {k: v for k, v in json.loads(config.read_text()).items() if k not in ("_name_or_path", "transformers_version")}
    # vLLM trusts a cache_dir it is given (it hashes its compile factors only into a folder it picks),
    # so this key holds them: the architecture, the engine's shape, vLLM's version (which pins
    # torch's) and its VLLM_* environment. Not the memory share: it sizes the KV cache, not the
    # graphs, and it follows what is free (beside a trainer it differs checkpoint to checkpoint).
    shape = {k: v for k, v in options.items() if k not in ("model", "compilation_config", "gpu_memory_utilization")}
    env = {k: v for k, v in os.environ.items() if k.startswith("VLLM_")}
    key = hashlib.sha256(json.dumps([arch, shape, version, env], sort_keys=True).encode()).hexdigest()[:16]
    root = Path(os.environ.get(COMPILE_CACHE_ENV) or Path.home() / ".cache" / "rlvr-run" / "vllm-compile")
    return root / key
