"""The openai generation backend against a loopback OpenAI-compatible server with long-tail
latencies (most answers in 50 ms, one in ten in 2 s): every request in one stream (a sliding
window of `concurrency` in flight) vs the runner's old shape (8 problems per call, each call
waiting for its slowest answer), side by side in one run, each against the ideal schedule of
its shape (the same latencies laid out with no overhead at all).

    .venv/bin/python bench/eval_openai.py [--requests 120] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import heapq
import multiprocessing
import os
import sys
import time
from pathlib import Path

from engine.evaluate.backends import make_generator
from engine.evaluate.backends.base import Decoding, Request

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "evaluate"))

FAST_S, SLOW_S, SLOW_EVERY = 0.05, 2.0, 10
OLD_CHUNK = 8  # problems per generate call in the old runner


def latency(prompt: str) -> float:
    """Request i is slow when i % 10 == 7: one in ten, spread through the dataset."""
    if prompt.startswith("instant"):
        return 0.0
    return SLOW_S if int(prompt.split()[-1]) % SLOW_EVERY == SLOW_EVERY - 3 else FAST_S


def sliding_window_ideal(latencies: list[float], concurrency: int) -> float:
    """Requests in order, each starting the moment one of `concurrency` slots frees."""
    free = [0.0] * concurrency
    end = 0.0
    for seconds in latencies:
        start = heapq.heappop(free)
        heapq.heappush(free, start + seconds)
        end = max(end, start + seconds)
    return end


def chunked_ideal(latencies: list[float], concurrency: int) -> float:
    return sum(sliding_window_ideal(latencies[i:i + OLD_CHUNK], concurrency)
               for i in range(0, len(latencies), OLD_CHUNK))


def serve(urls: multiprocessing.Queue, stop: multiprocessing.Event) -> None:
    """The server in a process of its own, as a real one would be (not sharing the client's GIL)."""
    from openai_server import Server

    with Server(latency=latency) as server:
        urls.put(server.base_url)
        stop.wait()
        urls.put(server.most_in_flight)


def run(url: str, requests: list[Request], concurrency: int) -> tuple[float, float, float]:
    backend = make_generator("openai", model="m", base_url=url, concurrency=concurrency)
    list(backend.stream(requests[:concurrency]))  # the first handshakes
    began = time.perf_counter()
    streamed = sum(1 for _ in backend.stream(requests))
    window_s = time.perf_counter() - began
    began = time.perf_counter()
    chunked = sum(1 for i in range(0, len(requests), OLD_CHUNK) for _ in backend.stream(requests[i:i + OLD_CHUNK]))
    chunked_s = time.perf_counter() - began
    assert streamed == chunked == len(requests)
    instant = [Request(f"instant {i}", r.decoding) for i, r in enumerate(requests)]  # no latency at all
    began = time.perf_counter()
    list(backend.stream(instant))
    return window_s, chunked_s, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    requests = [Request(f"problem {i}", Decoding(max_tokens=16)) for i in range(args.requests)]
    latencies = [latency(r.prompt) for r in requests]  # type: ignore[arg-type]
    context = multiprocessing.get_context("spawn")
    urls, stop = context.Queue(), context.Event()
    server = context.Process(target=serve, args=(urls, stop), daemon=True)
    server.start()
    try:
        window_s, chunked_s, instant_s = run(urls.get(timeout=60), requests, args.concurrency)
    finally:
        stop.set()
    most = urls.get(timeout=60)
    server.join()
    ideal_window, ideal_chunked = sliding_window_ideal(latencies, args.concurrency), chunked_ideal(latencies, args.concurrency)
    slow = sum(s == SLOW_S for s in latencies)
    print(f"{len(requests)} requests ({slow} of {SLOW_S:.0f} s, the rest {FAST_S * 1000:.0f} ms), "
          f"concurrency {args.concurrency} (server saw at most {most} at once)")
    print(f"  sliding window: {window_s:6.2f} s  ideal {ideal_window:6.2f} s  ratio {window_s / ideal_window:.2f}x")
    print(f"  8 per call:     {chunked_s:6.2f} s  ideal {ideal_chunked:6.2f} s  ratio {chunked_s / ideal_chunked:.2f}x")
    print(f"  sliding window vs 8 per call: {chunked_s / window_s:.1f}x faster")
    print(f"  (client and server overhead alone: {instant_s:.2f} s for the same requests answered at once; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
