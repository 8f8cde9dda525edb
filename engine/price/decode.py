"""One inference engine decoding a batch of sequences: the time of its decode steps as a function of
the sequences it holds and their context.

A decode step of an engine (vLLM, continuous batching) reads the weights once, whatever the batch,
computes each sequence's next token, and reads each sequence's KV cache:

    step = t_w + b·t_seq + (Σ context of the b sequences)·t_kv

b is bounded by `max_num_seqs` and by the KV cache's room: a sequence is admitted only when its
context fits beside the others', and when the growing contexts overflow the room the newest is
preempted (vLLM recomputes it later). So a full engine of short sequences is bound by t_seq, a
few long ones by their KV reads, and the longest sample's tail runs at the speed of a nearly empty
engine only once the engine has emptied.

The schedule (which sequences decode at which step) depends on tokens alone, not on the three
times, so it is simulated once per shape (`schedule`, cached) and a draw of the constants prices it
as steps·t_w + seq_steps·t_seq + context_steps·t_kv: linear in the constants, as `price --fit` needs.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

_NORMAL = NormalDist()
CHUNK = 64  # tokens advanced at once between admissions (finishes are exact)


@dataclass(frozen=True)
class Sums:
    """What one engine's decode of its sequences adds up to, in tokens."""

    steps: float  # decode steps: each reads the weights once
    seq_steps: float  # sequences decoded, summed over steps (= tokens generated)
    context_steps: float  # context tokens whose KV is read, summed over steps
    prefill: float  # prompt (and recomputed) tokens prefilled
    peak: int  # the most sequences decoded at once

    def seconds(self, t_w: float, t_seq: float, t_kv: float) -> float:
        return self.steps * t_w + self.seq_steps * t_seq + self.context_steps * t_kv


@lru_cache(maxsize=4096)  # the same shapes recur in every draw of a forecast: built once
def lengths_of(median: float, sigma: float, cap: float, count: int, longest: float) -> tuple[float, ...]:
    """`count` response lengths standing for one engine's share: the lognormal's quantiles clipped at
    `cap`, the largest replaced by `longest` (the whole batch's expected longest sample, which some
    engine holds and the batch waits for), in a fixed shuffled order (requests arrive unsorted)."""
    count = max(int(count), 1)
    values = [min(cap, median * math.exp(sigma * _NORMAL.inv_cdf((i + 0.5) / count))) if sigma else min(cap, median)
              for i in range(count)]
    values[-1] = max(values[-1], min(longest, cap))
    random.Random(count).shuffle(values)
    return tuple(max(1.0, round(v)) for v in values)


@lru_cache(maxsize=4096)
def schedule(lengths: tuple[float, ...], prompt: float, max_seqs: int, room: float) -> Sums:
    """Continuous batching of `lengths` (tokens to generate, in arrival order) after prompts of
    `prompt` tokens, at most `max_seqs` at once and their contexts within `room` tokens of KV cache."""
    import numpy as np

    total = np.asarray(lengths, dtype=float)
    done = np.zeros(len(total))
    queue, active = deque(range(len(total))), []
    steps = seq_steps = context_steps = prefill = 0.0
    peak = 0
    room = max(room, prompt + 1.0)
    # Lengths and prompts are whole tokens, so every sum below is exact in any order (numpy's too).
    while queue or active:
        used = len(active) * prompt + float(done[active].sum())
        while queue and len(active) < max_seqs:
            need = prompt + done[queue[0]] + 1
            if active and used + need > room:
                break
            i = queue.popleft()
            active.append(i)
            used += need
            prefill += prompt + done[i]
        idx = np.asarray(active)
        left = total[idx] - done[idx]
        delta = float(min(CHUNK, left.min()))
        b = len(active)
        peak = max(peak, b)
        context = float((prompt + done[idx]).sum())
        steps += delta
        seq_steps += b * delta
        context_steps += delta * context + b * delta * (delta - 1) / 2  # each context grows a token a step
        done[idx] += delta
        active = idx[done[idx] < total[idx]].tolist()
        used = len(active) * prompt + float(done[active].sum())
        while len(active) > 1 and used > room:  # the newest is preempted, to be recomputed later
            j = active.pop()
            queue.appendleft(j)
            used -= prompt + done[j]
    return Sums(steps=steps, seq_steps=seq_steps, context_steps=context_steps, prefill=prefill, peak=peak)
