"""k engines on k devices, one process each: data parallelism for a model that fits one GPU.

A model that fits one GPU runs fastest as k independent engines (no all-reduce per token), not
one engine with tensor parallelism k. Each worker process sees one device group through
CUDA_VISIBLE_DEVICES, loads its engine once, and streams back whatever it is given; the
requests are dealt round-robin (neighbours in a dataset tend to be alike in length, so every
engine gets a similar mix) and every finished request is yielded as it lands, from whichever
engine finished it.

The workers are not daemonic: vLLM starts its engine core as a child process of the worker, and
Python refuses a daemonic process children. They are ended by `close`, and at this process's
exit if it never closed them.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import queue
import traceback
from typing import Any, Iterator, Sequence

from engine.errors import UserError
from engine.evaluate.backends.base import Finished, Request
from engine.resources import load_object

_READY, _DONE, _FAILED = "ready", "done", "failed"


class DataParallel:
    def __init__(self, *, name: str, target: str, options: dict[str, Any], devices: Sequence[str]) -> None:
        """`target`: the backend class as `module:attribute` (each worker imports it itself)."""
        self.name = f"{name}x{len(devices)}"
        context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
        self.results: Any = context.Queue()
        self.inboxes = [context.Queue() for _ in devices]
        self.workers = [context.Process(target=_worker, args=(target, options, device, inbox, self.results, rank),
                                        name=f"engine-{rank}", daemon=False)
                        for rank, (device, inbox) in enumerate(zip(devices, self.inboxes))]
        for worker in self.workers:
            worker.start()
        atexit.register(self.close)
        for _ in self.workers:  # every engine loaded before the first request (a load error surfaces here)
            self._take()
        self.calls = 0  # each stream's number: answers to an earlier stream its caller left are dropped

    def _take(self) -> Any:
        while True:
            try:
                item = self.results.get(timeout=5.0)
            except queue.Empty:
                dead = [w for w in self.workers if not w.is_alive()]
                if dead:
                    self.close()
                    raise RuntimeError(f"generation worker {dead[0].name} died (exit {dead[0].exitcode})") from None
                continue
            if item[0] == _FAILED:
                self.close()
                raise UserError(item[1]) if item[2] else RuntimeError(item[1])
            return item

    def stream(self, requests: Sequence[Request]) -> Iterator[Finished]:
        # A caller that stops early (an error, one evaluation of a group failing) leaves the workers
        # finishing its shares; their answers carry that stream's number, so the next stream on
        # these engines never takes them for its own requests of the same index.
        self.calls += 1
        call = self.calls
        shares = [list(range(rank, len(requests), len(self.workers))) for rank in range(len(self.workers))]
        for inbox, share in zip(self.inboxes, shares):
            inbox.put((call, [(i, requests[i]) for i in share]))
        busy = len(self.workers)
        while busy:
            item = self._take()
            if item[1] != call:
                continue
            if item[0] == _DONE:
                busy -= 1
                continue
            yield item[2], item[3]

    def close(self) -> None:
        """Each engine shut down in its worker, and the worker gone (killed if it does not end)."""
        atexit.unregister(self.close)
        for inbox, worker in zip(self.inboxes, self.workers):
            if worker.is_alive():
                inbox.put(None)
        for worker in self.workers:
            worker.join(timeout=60)
            if worker.is_alive():
                worker.kill()
                worker.join(timeout=10)


def _worker(target: str, options: dict[str, Any], device: str, inbox: Any, results: Any, rank: int) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = device
    try:
        engine = load_object(target)(**options)
    except UserError as exc:
        results.put((_FAILED, str(exc), True))
        return
    except Exception:  # noqa: BLE001 (reported to the parent, which raises it)
        results.put((_FAILED, f"engine {rank} on device {device} failed to load:\n{traceback.format_exc()}", False))
        return
    results.put((_READY, rank))
    while (work := inbox.get()) is not None:
        call, share = work
        try:
            for local, gens in engine.stream([request for _, request in share]):
                results.put(("out", call, share[local][0], gens))
        except Exception:  # noqa: BLE001
            results.put((_FAILED, f"engine {rank} on device {device} failed:\n{traceback.format_exc()}", False))
            return
        results.put((_DONE, call))
    engine.close()
