"""W&B offline run files read back, for the tracker tests: a `.wandb` file is W&B's 7-byte header
(`:W&B`, a key, a version) then LevelDB's log format (32 KiB blocks of records, each a 7-byte
header: crc32, length, type FULL/FIRST/MIDDLE/LAST), each record a `wandb_internal_pb2.Record`."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as pb

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[pb.Record]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    out, pending, at = [], b"", HEADER
    while at + HEADER <= len(data):
        left = BLOCK - at % BLOCK
        if left < HEADER:  # the block's tail is padding
            at += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[at:at + HEADER])
        if at + HEADER + length > len(data):  # a record still being written: the file so far
            break
        chunk = data[at + HEADER:at + HEADER + length]
        at += HEADER + length
        if kind == 0 and length == 0:
            continue
        pending += chunk
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
    return out


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


@dataclass
class OfflineRun:
    run_id: str = ""
    name: str = ""
    group: str = ""
    job_type: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    history: dict[int, dict[str, float]] = field(default_factory=dict)  # step → key → value
    summary: dict = field(default_factory=dict)


def read_run(path: Path) -> OfflineRun:
    run = OfflineRun()
    for r in records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            run.run_id, run.name, run.group, run.job_type = r.run.run_id, r.run.display_name, r.run.run_group, r.run.job_type
            run.tags = list(r.run.tags)
            run.config.update({_key(i): json.loads(i.value_json) for i in r.run.config.update})
        elif kind == "config":
            run.config.update({_key(i): json.loads(i.value_json) for i in r.config.update})
        elif kind == "history":
            values = {_key(i): json.loads(i.value_json) for i in r.history.item}
            run.history[int(values.get("_step", r.history.step.num))] = values
        elif kind == "summary":
            run.summary.update({_key(i): json.loads(i.value_json) for i in r.summary.update})
    return run
