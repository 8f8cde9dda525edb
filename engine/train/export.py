"""A run directory's training data, from its frozen config.yaml: what a run's launch.sh does
first (`python -m engine.train.export --run-dir DIR --format FMT`). It writes the files
`engine.train.verl_overrides` hands verl (the rows come from `engine.train.rows`), plus
data/manifest.json; re-running it changes nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from engine.data.loaders import LoadedDataset
from engine.errors import UserError
from engine.judge.ground_truth import TRAIN_AND_VAL_FILE, TRAIN_FILE, VAL_FILE
from engine.plan.frozen import (
    FrozenDataset,
    FrozenRun,
    checked_idlist,
    load_frozen_dataset,
    read_frozen_run,
    run_registry,
)
from engine.spec.registry import Registry
from engine.train.curriculum import ordered
from engine.train.rows import (
    ExportResult,
    PromptChoice,
    RewardMode,
    build_rows,
    write_rows,
)


@dataclass(frozen=True, kw_only=True)
class RunLayout:
    """The files verl reads for one format (the paths `engine.train.verl_overrides` passes it)."""

    train: str
    valid: str
    valid_uses: frozenset[str]  # dataset uses verl validates on (never a test set)


RUN_LAYOUTS: dict[str, RunLayout] = {
    "verl-rl": RunLayout(train="train.parquet", valid="valid.parquet",
                         valid_uses=frozenset({"select", "early_stop"})),
    # verl's SFT trainer validates for checkpoint selection only.
    "verl-sft-messages": RunLayout(train="sft_train.parquet", valid="sft_valid.parquet",
                                   valid_uses=frozenset({"select"})),
}
TRAINABLE_ROLES = ("train", "valid")
MANIFEST = "manifest.json"


def load_run_dataset(name: str, entry: FrozenDataset, registry: Registry,
                     judge: Optional[dict[str, Any]] = None, run_dir: Optional[Path] = None) -> LoadedDataset:
    """The problems `entry` names, narrowed by its id list (verified against the frozen hash)."""
    if entry.role not in TRAINABLE_ROLES:
        raise UserError(f"dataset `{name}` has role {entry.role}: it is never written into training data\n"
                        "  fix: train and validate on train/valid datasets only (isolation rules 1-2)")
    return load_frozen_dataset(name, entry, registry, judge, run_dir)


def _manifest_entry(out: Path, fmt: str, parts: list[LoadedDataset], rows: int, skipped: list[str]) -> dict[str, Any]:
    return {"file": out.name, "format": fmt, "rows": rows, "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
            "datasets": [{"name": d.name, "problems": len(d.problems), "fingerprint": d.fingerprint,
                          "ids_sha256": d.idlist_sha256, "origin": d.origin} for d in parts],
            "skipped": skipped}


def _write_file(parts: list[LoadedDataset], out: Path, fmt: str, choice: PromptChoice,
                reward: RewardMode, files: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for loaded in parts:
        rows += build_rows(loaded, fmt, choice, skipped, reward=reward, start=len(rows), files=files)
    if not rows:
        raise UserError(f"nothing to write to {out.name} from {', '.join(d.name for d in parts)} as {fmt}: "
                        f"{skipped[0] if skipped else 'no problems'}")
    partial = out.with_name(f".{out.name}.partial{out.suffix}")
    write_rows(rows, partial)
    os.replace(partial, out)  # a crash never leaves a half-written file under the real name
    return _manifest_entry(out, fmt, parts, len(rows), skipped)


def _up_to_date(data_dir: Path, run: FrozenRun, fmt: str) -> Optional[list[dict[str, Any]]]:
    """The manifest's entries for `fmt` when every file they name is on disk unchanged."""
    try:
        manifest = json.loads((data_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    entries = manifest.get("exports", {}).get(fmt) if manifest.get("run_id") == run.run_id else None
    if not entries:
        return None
    for entry in entries:
        path = data_dir / entry["file"]
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
            return None
    return entries


def _result(data_dir: Path, entry: dict[str, Any]) -> ExportResult:
    return ExportResult(path=data_dir / entry["file"], format=entry["format"], rows=entry["rows"],
                        skipped=list(entry["skipped"]), sha256=entry["sha256"])


def export_run(run_dir: Path, fmt: str, model: Optional[str] = None) -> list[ExportResult]:
    """Write the run's training data under `run_dir/data/` from its frozen config.yaml.

    The `train` dataset goes to the layout's train file, the datasets verl validates
    on to its valid file (none: no valid file, and verl validates on train). Every id
    list must still hash to its frozen sha256. A second call with the files unchanged
    on disk loads nothing and returns what data/manifest.json records.
    """
    layout = RUN_LAYOUTS.get(fmt)
    if layout is None:
        raise UserError(f"unknown run export format `{fmt}`; use one of: {', '.join(RUN_LAYOUTS)}")
    run_dir = Path(run_dir).resolve()
    run = read_frozen_run(run_dir)
    registry = run_registry(run_dir)
    for name, entry in run.datasets.items():  # also when the manifest says nothing changed
        entry.check_located(name)
        checked_idlist(name, entry, registry.project_root)
    data_dir = run_dir / "data"
    entries = _up_to_date(data_dir, run, fmt)
    if entries is None:
        entries = _export_files(run, fmt, layout, registry, data_dir, model)
        _write_manifest(data_dir, run, fmt, entries)
    return [_result(data_dir, e) for e in entries]


def _export_files(run: FrozenRun, fmt: str, layout: RunLayout, registry: Registry,
                  data_dir: Path, model: Optional[str]) -> list[dict[str, Any]]:
    train = [n for n, d in run.datasets.items() if "train" in d.uses]
    valid = [n for n, d in run.datasets.items() if layout.valid_uses & set(d.uses)]
    if not train:
        raise UserError(f"run {run.run_id} ({run.kind}) has no `train:` dataset to export\n"
                        "  fix: only training runs (sft, grpo, repair) export data")
    choice = PromptChoice(registry=registry, template=run.prompt_template(), model=run.base_model)
    data_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    # Each RL row says which of verl's files holds it, so the reward tells validation from training
    # by the data; without a valid file verl validates on the train file (`engine.train.verl_overrides`).
    train_files = TRAIN_FILE if valid else TRAIN_AND_VAL_FILE
    for names, filename, files in ((train, layout.train, train_files), (valid, layout.valid, VAL_FILE)):
        if names:
            parts = [load_run_dataset(n, run.datasets[n], registry, run.judge, data_dir.parent) for n in names]
            if filename == layout.train:  # verl reads the rows in file order (data.shuffle=False)
                parts = ordered(run, data_dir.parent, model, parts)
            entries.append(_write_file(parts, data_dir / filename, fmt, choice, run.reward or "dense", files))
    return entries


def _write_manifest(data_dir: Path, run: FrozenRun, fmt: str, entries: list[dict[str, Any]]) -> None:
    path = data_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        manifest = {}
    if manifest.get("run_id") != run.run_id:
        manifest = {"run_id": run.run_id, "exports": {}}
    manifest["exports"][fmt] = entries
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def main(argv: Optional[list[str]] = None) -> int:
    """`python -m engine.train.export --run-dir DIR --format FMT` (the first line of a run's launch.sh)."""
    parser = argparse.ArgumentParser(prog="python -m engine.train.export",
                                     description="write a run directory's training data from its config.yaml")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--format", required=True, choices=tuple(RUN_LAYOUTS))
    parser.add_argument("--model", help="the starting model (measures pass rates for a curriculum without difficulties)")
    args = parser.parse_args(argv)
    try:
        results = export_run(args.run_dir, args.format, args.model)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary_line(args.run_dir, results))
    return 0


def summary_line(run_dir: Path, results: list[ExportResult]) -> str:
    files = ", ".join(f"{r.path.name} {r.rows} rows" + (f" ({len(r.skipped)} skipped)" if r.skipped else "")
                      for r in results)
    return f"exported {results[0].format} data of {Path(run_dir).name}: {files}"


if __name__ == "__main__":
    sys.exit(main())
