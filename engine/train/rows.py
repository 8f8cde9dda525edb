"""Training files for verl and trl, from loaded problems.

- `verl-rl`: verl's RL parquet: data_source, prompt (chat list), ability,
  reward_model {style: rule, ground_truth: the tests as `RewardTests` JSON that
  `engine.reward.compute_score` reads}, extra_info {id, split, index, reward_mode, ...}; a run's
  export adds which of verl's data files holds the row (`engine.judge.ground_truth.DATA_FILES`).
- `verl-sft-messages`: verl 0.8+ `MultiTurnSFTDataset` rows: `messages` with the reference
  solution as the assistant turn, in the answer format the prompt asks for.
- `trl-sft`: `prompt`/`completion` (conversational for chat models: trl's loss covers the answer only).
- `trl-dpo`: `prompt`/`chosen`/`rejected` (conversational for chat models).
- `trl-grpo`: `prompt` plus the columns the reward function reads
  (`ground_truth`, `problem_id`, `reward_mode`), which GRPOTrainer passes as kwargs.

`data_source` is `rlvr/<source>`: verl routes built-in sources such as
`codecontests` to its own scorer, and ours must never be mistaken for those.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal, Optional, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from engine.data.loaders import LoadedDataset
from engine.errors import UserError
from engine.judge.ground_truth import DATA_FILES, ground_truth_from_problem
from engine.problem import Problem
from engine.prompts.templates import (
    Message,
    PromptChoice,
)

ExportFormat = Literal["verl-rl", "verl-sft-messages", "trl-sft", "trl-dpo", "trl-grpo"]
EXPORT_FORMATS: tuple[str, ...] = ("verl-rl", "verl-sft-messages", "trl-sft", "trl-dpo", "trl-grpo")
RewardMode = Literal["dense", "sparse"]


class PreferenceText(Protocol):
    """One preference pair as texts (what `engine.train.pairs` produces)."""

    problem_id: str
    chosen: str
    rejected: str


@dataclass(frozen=True, kw_only=True)
class Pair:
    problem_id: str
    chosen: str
    rejected: str


@dataclass(frozen=True, kw_only=True)
class ExportResult:
    path: Path
    format: str
    rows: int
    skipped: list[str]  # problem ids left out (no reference solution, no pair), with the reason
    sha256: str  # of the written file


def _dumps(messages: list[Message] | str) -> list[dict[str, str]] | str:
    return messages if isinstance(messages, str) else [m.model_dump() for m in messages]


def _chat(choice: PromptChoice, problem: Problem, what: str) -> list[dict[str, str]]:
    prompt = choice.prompt(problem)
    if isinstance(prompt, str):
        raise UserError(f"{what} needs a chat prompt, but {problem.id} got a completion template\n"
                        "  fix: use a chat template (verl applies the model's own chat template to it)")
    return _dumps(prompt)  # type: ignore[return-value]


def verl_rl_rows(loaded: LoadedDataset, choice: PromptChoice, reward: RewardMode = "dense",
                 start: int = 0, files: Optional[str] = None) -> list[dict[str, Any]]:
    """`start` offsets `index` so rows of several datasets in one file stay distinct; `files`
    (a run's export knows it) is which of verl's data files the rows go to, which tells the
    reward a validation call from a training one."""
    where = {DATA_FILES: files} if files else {}
    return [{
        "data_source": f"rlvr/{p.source}",
        "prompt": _chat(choice, p, "verl RL data"),
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": ground_truth_from_problem(p)},
        "extra_info": {"index": index, "id": p.id, "split": p.split, "dataset": loaded.name,
                       "reward_mode": reward, "answer": choice.template_for(p).answer, **where},
    } for index, p in enumerate(loaded.problems, start)]


def _with_solution(loaded: LoadedDataset, skipped: list[str]) -> Iterable[tuple[Problem, str]]:
    for p in loaded.problems:
        if p.solutions:
            yield p, p.solutions[0]
        else:
            skipped.append(f"{p.id}: no reference solution")


def sft_rows(loaded: LoadedDataset, choice: PromptChoice, skipped: list[str], *,
             split_prompt: bool = False) -> list[dict[str, Any]]:
    """`messages` rows (chat) or `prompt`/`completion` rows (completion templates, or any template
    with `split_prompt`: trl then puts the loss on the answer only, which a small model needs to
    learn anything: 36/42 toy problems after 400 steps against 0/42 with the prompt in the loss)."""
    rows = []
    for p, solution in _with_solution(loaded, skipped):
        prompt, answer = choice.prompt(p), choice.response(p, solution)
        if isinstance(prompt, str):
            rows.append({"prompt": prompt, "completion": answer})
        elif split_prompt:
            rows.append({"prompt": _dumps(prompt), "completion": [{"role": "assistant", "content": answer}]})
        else:
            rows.append({"messages": _dumps(prompt) + [{"role": "assistant", "content": answer}]})
    return rows


def reference_pairs(loaded: LoadedDataset, skipped: list[str]) -> list[Pair]:
    """Offline pairs from the source itself: a correct vs an incorrect reference solution."""
    pairs = []
    for p in loaded.problems:
        if p.solutions and p.incorrect_solutions:
            pairs.append(Pair(problem_id=p.id, chosen=p.solutions[0], rejected=p.incorrect_solutions[0]))
        else:
            skipped.append(f"{p.id}: needs a correct and an incorrect solution for a pair")
    return pairs


def dpo_rows(loaded: LoadedDataset, choice: PromptChoice, pairs: Iterable[PreferenceText],
             skipped: list[str]) -> list[dict[str, Any]]:
    by_id = {p.id: p for p in loaded.problems}
    rows = []
    for pair in pairs:
        problem = by_id.get(pair.problem_id)
        if problem is None:
            skipped.append(f"{pair.problem_id}: pair for a problem not in dataset `{loaded.name}`")
            continue
        prompt = choice.prompt(problem)
        chosen, rejected = choice.response(problem, pair.chosen), choice.response(problem, pair.rejected)
        if isinstance(prompt, str):
            rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
        else:
            rows.append({"prompt": _dumps(prompt), "chosen": [{"role": "assistant", "content": chosen}],
                         "rejected": [{"role": "assistant", "content": rejected}]})
    return rows


def grpo_rows(loaded: LoadedDataset, choice: PromptChoice, reward: RewardMode = "dense") -> list[dict[str, Any]]:
    return [{"prompt": _dumps(choice.prompt(p)), "ground_truth": ground_truth_from_problem(p),
             "problem_id": p.id, "reward_mode": reward} for p in loaded.problems]


def write_rows(rows: list[dict[str, Any]], path: Path) -> str:
    """Parquet for `.parquet`, JSON Lines otherwise; returns the file's sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_rows(loaded: LoadedDataset, fmt: str, choice: PromptChoice, skipped: list[str], *,
               reward: RewardMode = "dense", pairs: Optional[Iterable[PreferenceText]] = None,
               start: int = 0, files: Optional[str] = None) -> list[dict[str, Any]]:
    """`loaded` as rows of `fmt`; problems left out are appended to `skipped` with the reason."""
    if fmt == "verl-rl":
        rows = verl_rl_rows(loaded, choice, reward, start, files)
    elif fmt in ("verl-sft-messages", "trl-sft"):
        rows = sft_rows(loaded, choice, skipped, split_prompt=fmt == "trl-sft")
        if fmt == "verl-sft-messages" and rows and "messages" not in rows[0]:
            raise UserError("verl's SFT trainer reads chat `messages`; use a chat template or `trl-sft`")
    elif fmt == "trl-dpo":
        rows = dpo_rows(loaded, choice, reference_pairs(loaded, skipped) if pairs is None else pairs, skipped)
    elif fmt == "trl-grpo":
        rows = grpo_rows(loaded, choice, reward)
    else:
        raise UserError(f"unknown export format `{fmt}`; use one of: {', '.join(EXPORT_FORMATS)}")
    return rows


def export_dataset(loaded: LoadedDataset, fmt: str, out: Path, choice: PromptChoice, *,
                   reward: RewardMode = "dense", pairs: Optional[Iterable[PreferenceText]] = None) -> ExportResult:
    """Write `loaded` as training data in `fmt`; pairs default to the source's reference pairs."""
    skipped: list[str] = []
    rows = build_rows(loaded, fmt, choice, skipped, reward=reward, pairs=pairs)
    if not rows:
        raise UserError(f"nothing to export from dataset `{loaded.name}` as {fmt}: "
                        f"{skipped[0] if skipped else 'it has no problems'}")
    return ExportResult(path=out, format=fmt, rows=len(rows), skipped=skipped, sha256=write_rows(rows, out))


def read_pairs(path: Path) -> list[Pair]:
    """Pairs from JSON Lines with `problem_id`, `chosen`, `rejected` (extra keys ignored)."""
    pairs = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UserError(f"cannot read pairs file {path}: {exc.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            pairs.append(Pair(problem_id=str(row["problem_id"]), chosen=row["chosen"], rejected=row["rejected"]))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise UserError(f"{path}:{number}: not a pair ({type(exc).__name__}: {exc})\n"
                            "  fix: one JSON object per line with problem_id, chosen and rejected") from None
    return pairs
