"""vLLM's offline engine (GPU): n samples per prompt share the prefill."""

from __future__ import annotations

import time
from typing import Sequence

from engine.errors import UserError
from engine.evaluate.backends.base import Decoding, Generation, Prompt, prompt_share


class VLLMBackend:
    name = "vllm"

    def __init__(self, *, model: str, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.85) -> None:
        try:
            from vllm import LLM
        except ImportError:
            raise UserError("the vllm backend needs vllm, which is not installed here\n"
                            "  fix: on a GPU machine install the gpu extra (pip install -e '.[gpu]'), "
                            "or choose `backend: hf` or `backend: openai` for this evaluation") from None
        self.llm = LLM(model=model, tensor_parallel_size=tensor_parallel_size,
                       gpu_memory_utilization=gpu_memory_utilization)

    def generate(self, prompts: Sequence[Prompt], decoding: Decoding) -> list[list[Generation]]:
        from vllm import SamplingParams

        params = SamplingParams(n=decoding.n, temperature=decoding.temperature, top_p=decoding.top_p,
                                top_k=decoding.top_k, max_tokens=decoding.max_tokens, stop=list(decoding.stop) or None,
                                seed=decoding.seed)
        began = time.perf_counter()
        if prompts and all(not isinstance(p, str) for p in prompts):
            outputs = self.llm.chat(list(prompts), params, use_tqdm=False)
        else:  # completion prompts, or a mix: chat messages go through the model's chat template
            outputs = self.llm.generate([self._text(p) for p in prompts], params, use_tqdm=False)
        latency = (time.perf_counter() - began) / max(1, len(prompts) * decoding.n)
        return [[Generation(text=c.text, prompt_tokens=prompt_share(len(o.prompt_token_ids), len(o.outputs), i),
                            completion_tokens=len(c.token_ids),
                            finish_reason="length" if c.finish_reason == "length" else "stop", latency_s=latency,
                            seed=decoding.seed) for i, c in enumerate(o.outputs)] for o in outputs]

    def _text(self, prompt: Prompt) -> str:
        if isinstance(prompt, str):
            return prompt
        return self.llm.get_tokenizer().apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)

    def close(self) -> None:
        self.llm = None
