"""One record per (problem, sample), appended as soon as it is judged; resumable by key.

A record holds the generation facts (tokens, finish_reason, latency, seed) and the judge
facts (verdict, per-test results, judge time and version), and the content keys of what
produced it: the model's checkpoint hash, the protocol hash and the id-list hash. A file
is read back only for records whose keys match the current run, so a changed model or
protocol never resumes into stale samples.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Iterable, Iterator, Optional

from pydantic import BaseModel, Field, ValidationError

from engine.files import end_torn_line
from engine.judge.verdict import TestResult

GEN_ERROR = "GEN_ERROR"  # the backend gave no text after every retry: not the model's fault, not a pass
INTERNAL_ERROR = "INTERNAL_ERROR"  # the judge failed (not the program): judged again on a re-run
FAULTS = frozenset({GEN_ERROR, INTERNAL_ERROR})  # verdicts that are the machinery's failure, not the model's


class Keys(BaseModel):
    """What a sample's content depends on: records with other keys are not this run's."""

    model: str  # checkpoint hash (or hub id)
    protocol: str  # sha256 of the resolved decoding protocol
    idlist: str  # sha256 of the frozen id list, or the dataset's fingerprint
    decoding_seed: int = 0  # the seed sampling drew from (`run.decoding_seed`); the protocol's when greedy


class GenerationRecord(BaseModel):
    dataset: str
    problem_id: str
    sample: int  # 0..n-1 within its problem
    round: int = 1  # repair round (1 = the first answer)
    parent: Optional[str] = None  # the sample this one repairs (its `uid`)
    keys: Keys
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # stop | length | error
    latency_s: float
    seed: int
    completion: str
    error: Optional[str] = None
    conversation: Optional[list[dict[str, str]]] = None  # repair rounds: the messages this answer followed
    engine: Optional[str] = None  # the backend and its version that made it ("vllm 0.24.0"); None: older records

    @property
    def uid(self) -> str:
        return f"{self.dataset}/{self.problem_id}/{self.sample}/r{self.round}"


class SampleRecord(GenerationRecord):
    code: str = ""  # what the judge ran (extracted from the completion)
    verdict: str  # a judge Verdict name, or GEN_ERROR
    accepted: bool
    pass_ratio: float
    passed: int
    total: int
    format_ok: bool
    tests: list[TestResult] = Field(default_factory=list)  # the first failing tests (public and private)
    judge_s: float  # wall seconds the judge spent on this sample
    judge_cpu_s: float = 0.0
    cached: bool = False
    judge_version: str
    stderr_tail: str = ""


class Appender:
    """A records file held open while records stream in: each `write` is flushed to the operating
    system at once (a killed process loses at most the line being written, skipped when read) and
    synced to disk at most every `sync_s` and on close (thousands of answers a minute must not
    wait a disk sync each). A torn last line left by an earlier kill is ended first, so the next
    record starts a line of its own."""

    def __init__(self, path: Path, *, sync_s: float = 1.0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = path.open("a+b")
        end_torn_line(self.handle)
        self.sync_s, self.synced = sync_s, time.monotonic()

    def write(self, records: Iterable[BaseModel]) -> None:
        self.handle.write("".join(record.model_dump_json() + "\n" for record in records).encode("utf-8"))
        self.handle.flush()
        if time.monotonic() - self.synced >= self.sync_s:
            self.sync()

    def sync(self) -> None:
        os.fsync(self.handle.fileno())
        self.synced = time.monotonic()

    def __enter__(self) -> "Appender":
        return self

    def __exit__(self, *exc: object) -> None:
        self.sync()
        self.handle.close()


def append(path: Path, records: Iterable[BaseModel]) -> None:
    """Append and sync at once (one batch of records)."""
    with Appender(path) as out:
        out.write(records)


def read(path: Path, model: type[GenerationRecord], keys: Optional[Keys] = None) -> Iterator[GenerationRecord]:
    """The file's records of `keys` (all when None), one per uid: the last one written (a fault
    generated or judged again replaces the faulty record), ordered by (dataset, problem, sample,
    round). Not in file order: records land as requests and verdicts finish, an order two runs
    of the same spec do not share, and what reads them (repair batches, pair tie-breaks, the
    metrics) must see the same sequence each time. A torn line is skipped."""
    if not path.exists():
        return
    latest: dict[str, GenerationRecord] = {}
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            try:
                record = model.model_validate(json.loads(line))
            except (json.JSONDecodeError, ValidationError):
                continue
            if keys is None or record.keys == keys:
                latest[record.uid] = record
    yield from sorted(latest.values(), key=lambda r: (r.dataset, r.problem_id, r.sample, r.round))


SET_ASIDE = "replaced"  # a samples folder's subfolder of files a re-judge replaced


def set_aside(path: Path) -> Path:
    """Move a records file a re-judge replaces out of its folder, into `replaced/` under a name no
    earlier one has: it stays for inspection, but nothing that reads the folder's samples sees it."""
    folder = path.parent / SET_ASIDE
    folder.mkdir(parents=True, exist_ok=True)
    n = 1 + max((int(p.suffixes[-2].lstrip(".")) for p in folder.glob(f"{path.stem}.*.jsonl")
                 if len(p.suffixes) >= 2 and p.suffixes[-2].lstrip(".").isdigit()), default=0)
    return path.rename(folder / f"{path.stem}.{n}.jsonl")


def sample_files(folder: Path) -> list[Path]:
    """The records files of a samples folder, one per dataset: never a set-aside one (earlier
    versions left them beside the others as `<dataset>.replaced-<time>.jsonl`)."""
    return [p for p in sorted(Path(folder).glob("*.jsonl")) if ".replaced-" not in p.name]


def is_fault(record: GenerationRecord) -> bool:
    """A generation that failed on the server, or a sample the judge failed on: not the model's answer."""
    return record.finish_reason == "error" or getattr(record, "verdict", None) in FAULTS
