"""transformers on CPU or one GPU: every request of a dataset, in batches of `batch_size` prompts
(left padding, n samples per prompt in one call), grouped by decoding and sorted by length so a
batch wastes little on padding; each batch's samples are yielded as it finishes."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Iterator, Sequence

from engine.errors import UserError
from engine.evaluate.backends.base import (
    Decoding,
    Finished,
    Generation,
    Prompt,
    Request,
    cut_at_stop,
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

    def _text(self, prompt: Prompt) -> str:
        if isinstance(prompt, str):
            return prompt
        return self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)

    def stream(self, requests: Sequence[Request]) -> Iterator[Finished]:
        texts = [self._text(r.prompt) for r in requests]
        lengths = [len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
        order = sorted(range(len(requests)), key=lambda i: (_decoding_key(requests[i].decoding), -lengths[i]))
        batch: list[int] = []
        for index in order:
            if batch and (len(batch) == self.batch_size or requests[batch[0]].decoding != requests[index].decoding):
                yield from zip(batch, self._batch([texts[i] for i in batch], requests[batch[0]].decoding))
                batch = []
            batch.append(index)
        if batch:
            yield from zip(batch, self._batch([texts[i] for i in batch], requests[batch[0]].decoding))

    def _batch(self, texts: list[str], decoding: Decoding) -> list[list[Generation]]:
        import torch

        if decoding.greedy and decoding.n > 1:  # greedy samples are all the same: decode once
            return [[replace(g, prompt_tokens=prompt_share(g.prompt_tokens, decoding.n, j)) for j, g in enumerate(gens * decoding.n)]
                    for gens in self._batch(texts, replace(decoding, n=1))]
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        torch.manual_seed(decoding.seed)
        sampling = {} if decoding.greedy else {"do_sample": True, "temperature": decoding.temperature,
                                               "top_p": decoding.top_p,
                                               **({"top_k": decoding.top_k} if decoding.top_k > 0 else {})}
        began = time.perf_counter()
        with torch.no_grad():
            ids = self.model.generate(**enc, max_new_tokens=decoding.max_tokens, num_return_sequences=decoding.n,
                                      do_sample=not decoding.greedy, pad_token_id=self.tokenizer.pad_token_id,
                                      **{k: v for k, v in sampling.items() if k != "do_sample"})
        latency = (time.perf_counter() - began) / max(1, len(texts) * decoding.n)
        new = ids[:, enc["input_ids"].shape[1]:]
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        gens = [self._generation(row, prompt_share(prompt_lens[i // decoding.n], decoding.n, i % decoding.n), decoding,
                                 latency) for i, row in enumerate(new)]
        return [gens[i * decoding.n:(i + 1) * decoding.n] for i in range(len(texts))]

    def _generation(self, row, prompt_tokens: int, decoding: Decoding, latency: float) -> Generation:
        tokens = row.tolist()
        special = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        ended = next((i for i, t in enumerate(tokens) if t in special), None)
        used = tokens[:ended] if ended is not None else tokens
        text, stopped = cut_at_stop(self.tokenizer.decode(used, skip_special_tokens=True), decoding.stop)
        finish = "stop" if ended is not None or stopped else "length"
        return Generation(text=text, prompt_tokens=int(prompt_tokens), completion_tokens=len(used),
                          finish_reason=finish, latency_s=latency, seed=decoding.seed)

    def close(self) -> None:
        self.model = None


def _decoding_key(decoding: Decoding) -> str:
    return repr(decoding)
