"""vLLM's offline engine (GPU): every request of a dataset submitted at once, each request's samples
yielded the step they finish.

`LLM.generate` returns only when the last sequence ends, so a kill would lose the whole dataset;
instead the requests go to the engine under `LLM` (`add_request`, then `step` until none is
left, which is what `LLM.generate` itself does), and the caller writes each finished request
while the engine keeps its batch full with the rest. n samples per prompt share the prefill.
"""

from __future__ import annotations

import time
from typing import Any, Iterator, Optional, Sequence

from engine.errors import UserError
from engine.evaluate.backends.base import Decoding, Finished, Generation, Prompt, Request, prompt_share


class VLLMBackend:
    name = "vllm"

    def __init__(self, *, model: str, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 max_num_seqs: Optional[int] = None) -> None:
        try:
            from vllm import LLM
        except ImportError:
            raise UserError("the vllm backend needs vllm, which is not installed here\n"
                            "  fix: on a GPU machine install the gpu extra (pip install -e '.[gpu]'), "
                            "or choose `backend: hf` or an `endpoint:` for this evaluation") from None
        options: dict[str, Any] = {"model": model, "tensor_parallel_size": tensor_parallel_size,
                                   "gpu_memory_utilization": gpu_memory_utilization}
        if max_num_seqs:
            options["max_num_seqs"] = max_num_seqs
        self.llm = LLM(**options)
        self.tokenizer = self.llm.get_tokenizer()
        self._submitted = 0  # request ids stay unique across calls on one engine

    def _text(self, prompt: Prompt) -> str:
        if isinstance(prompt, str):
            return prompt
        return self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)

    def stream(self, requests: Sequence[Request]) -> Iterator[Finished]:
        engine = self.llm.llm_engine
        first, self._submitted = self._submitted, self._submitted + len(requests)
        pending = {f"r{first + i}": i for i in range(len(requests))}
        began = time.perf_counter()
        for request_id, i in pending.items():
            engine.add_request(request_id, self._text(requests[i].prompt), _params(requests[i].decoding))
        try:
            while pending:
                for out in engine.step():
                    if out.finished and out.request_id in pending:
                        index = pending.pop(out.request_id)
                        yield index, _generations(out, requests[index].decoding, time.perf_counter() - began)
        finally:
            if pending:  # the caller stopped early: the engine drops what it still holds
                engine.abort_request(list(pending))

    def close(self) -> None:
        self.llm = None


def _params(decoding: Decoding) -> Any:
    from vllm import SamplingParams

    return SamplingParams(n=decoding.n, temperature=decoding.temperature, top_p=decoding.top_p,
                          top_k=decoding.top_k, max_tokens=decoding.max_tokens, stop=list(decoding.stop) or None,
                          seed=decoding.seed)


def _generations(out: Any, decoding: Decoding, latency: float) -> list[Generation]:
    return [Generation(text=c.text, prompt_tokens=prompt_share(len(out.prompt_token_ids), len(out.outputs), i),
                       completion_tokens=len(c.token_ids),
                       finish_reason="length" if c.finish_reason == "length" else "stop", latency_s=latency,
                       seed=decoding.seed) for i, c in enumerate(out.outputs)]
