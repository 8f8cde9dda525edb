"""transformers on CPU or one GPU: every request of a dataset, in batches of `batch_size` prompts
(left padding, n samples per prompt in one call), grouped by decoding and sorted by length so a
batch wastes little on padding; each batch's samples are yielded as it finishes.

A protocol decodes here as it does on vLLM: a plain prompt is tokenized with the tokenizer's
special tokens, a chat prompt is its template's rendering without them (the template writes
them); and the checkpoint's generation_config decides nothing but where to stop (its top_k,
repetition_penalty and the like are set to the protocol's, or off), as vLLM's engine reads it.
Greedy samples are decoded once and repeated. Sampled requests of one decoding but their seeds
share a batch, under the first one's seed (hf draws one random stream per batch): each sample
records that seed."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Iterator, Sequence

from engine.errors import UserError
from engine.evaluate.backends.base import (
    Decoding,
    Finished,
    Generation,
    Prompt,
    Request,
    cut_at_stop,
    once_if_greedy,
    prompt_share,
)


class HFBackend:
    name = "hf"

    def __init__(self, *, model: str, batch_size: int = 16, device: str = "auto") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model)
            self.model = AutoModelForCausalLM.from_pretrained(model).to(self.device).eval()
        except OSError as exc:
            raise UserError(f"cannot load model {model}: {str(exc).splitlines()[0]}\n"
                            "  fix: point the run at a Hugging Face model folder or hub id") from None
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.batch_size = batch_size
        import transformers

        self.engine = f"hf transformers {transformers.__version__}"

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
        text = self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def stream(self, requests: Sequence[Request]) -> Iterator[Finished]:
        ids = [self.prompt_ids(r.prompt) for r in requests]
        order = sorted(range(len(requests)), key=lambda i: (_decoding_key(requests[i].decoding), -len(ids[i])))
        batch: list[int] = []
        for index in order:
            if batch and (len(batch) == self.batch_size
                          or _decoding_key(requests[batch[0]].decoding) != _decoding_key(requests[index].decoding)):
                yield from zip(batch, self._batch([ids[i] for i in batch], requests[batch[0]].decoding))
                batch = []
            batch.append(index)
        if batch:
            yield from zip(batch, self._batch([ids[i] for i in batch], requests[batch[0]].decoding))

    def _batch(self, prompts: list[list[int]], decoding: Decoding) -> list[list[Generation]]:
        import torch

        if decoding.greedy and decoding.n > 1:  # greedy samples are all the same: decode once
            return [[replace(g, prompt_tokens=prompt_share(g.prompt_tokens, decoding.n, j)) for j, g in enumerate(gens * decoding.n)]
                    for gens in self._batch(prompts, once_if_greedy(decoding))]
        enc = self.tokenizer.pad({"input_ids": prompts}, return_tensors="pt", padding=True).to(self.device)
        torch.manual_seed(decoding.seed)
        began = time.perf_counter()
        with torch.no_grad():
            ids = self.model.generate(**enc, max_new_tokens=decoding.max_tokens, num_return_sequences=decoding.n,
                                      pad_token_id=self.tokenizer.pad_token_id, **_sampling(decoding))
        latency = (time.perf_counter() - began) / max(1, len(prompts) * decoding.n)
        new = ids[:, enc["input_ids"].shape[1]:]
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        gens = [self._generation(row, prompt_share(prompt_lens[i // decoding.n], decoding.n, i % decoding.n), decoding,
                                 latency) for i, row in enumerate(new)]
        return [gens[i * decoding.n:(i + 1) * decoding.n] for i in range(len(prompts))]

    def _generation(self, row, prompt_tokens: int, decoding: Decoding, latency: float) -> Generation:
        tokens = row.tolist()
        special = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        ended = next((i for i, t in enumerate(tokens) if t in special), None)
        used = tokens[:ended] if ended is not None else tokens
        text, stopped = cut_at_stop(self.tokenizer.decode(used, skip_special_tokens=True), decoding.stop)
        finish = "stop" if ended is not None or stopped else "length"
        return Generation(text=text, prompt_tokens=int(prompt_tokens), completion_tokens=len(used),
                          finish_reason=finish, latency_s=latency, seed=decoding.seed, engine=self.engine)

    def close(self) -> None:
        self.model = None


def _decoding_key(decoding: Decoding) -> str:
    """Requests that may share a batch: one decoding, whatever their seeds."""
    return repr(replace(decoding, seed=0))


def _sampling(decoding: Decoding) -> dict[str, Any]:
    """The protocol's decoding, every knob a checkpoint's generation_config could set pinned (a
    value left unset is the checkpoint's default in transformers, and vLLM's engine applies none)."""
    neutral = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0}
    if decoding.greedy:  # the sampling knobs do nothing without sampling
        return {"do_sample": False, **neutral}
    return {"do_sample": True, "temperature": decoding.temperature, "top_p": decoding.top_p,
            "top_k": decoding.top_k if decoding.top_k > 0 else 0, "min_p": 0.0, "typical_p": 1.0, **neutral}
