"""`python -m engine.train.verl_watch --run-dir DIR -- COMMAND...`: runs a verl training
command and stops it by the rules trl runs stop themselves by (`engine.train.early_stop`).

verl has no early stopping. The watcher reads what verl writes as it trains:

- `early_stop_on`: the validation rows of the file logger at the saved steps, ranked by
  the headline the hand-off uses (`engine.train.verl_finish`: accepted@1, SFT's val/loss).
  verl validates select_on and early_stop_on data in one pass, so the headline covers both.
- `early_stop.timeout_rate`: the rollouts verl dumps per step under `traces/verl_rollouts/`
  (`trainer.rollout_data_dir`), each with our reward's verdict: in the row (verl's legacy
  trainer dumps the reward's extra fields), else from the reward's own records of the run
  (`engine.judge.reward.REWARD_RECORDS`), joined on the step and the rollout (its ground truth
  and response): verl 0.9.1's default trainer dumps only the prompt, response, ground truth and
  score. `judged_per_step` counts those records: the rollouts of step k the reward judged, which
  must be its batch times rollout.n.
- judge faults, for every RL run: a step whose share of INTERNAL_ERROR verdicts in those
  rollouts passes `early_stop.JUDGE_FAULT_SHARE` is a failure, not an early stop: the
  watcher stops the command the same way, says why on stderr and exits 1, so the launch
  script fails before any hand-off.
- unjudged rollouts: a dumped rollout of a GRPO run with no verdict in its row and no record of
  the reward fails the run the same way, naming the step and the count: the rules above cannot
  see its verdict, and counted as neither fault nor timeout it would only thin their rates (as a
  judge fault it would blame the judge for what is the records' fault). A repair run's agent loop
  scores its trajectories itself (`engine.train.verl_repair_loop`), without the reward's records.

On an early-stop reason it writes outputs/early_stop.json, sends SIGTERM to the command (the launch
script's `timeout` relays it to the trainer's process group), SIGKILL after a grace
period, and exits 0: the launch script goes on to hand off the best saved step. A signal
the watcher itself receives is passed on to the command the same way, and on Linux its death
too: SIGKILL of the launch script's process group alone (an OOM kill, a kill by hand; the local
executor ends every process of a run itself) reaches neither `timeout`, which leads a group of its
own, nor verl's Ray processes, so the command gets SIGTERM when the watcher dies (and `timeout`
relays it to the trainer's group); a resumed attempt must never find the killed one still
training into the same checkpoints.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

from engine.files import read_jsonl
from engine.judge.reward import REWARD_RECORDS, rollout_key
from engine.plan.frozen import FrozenRun, read_frozen_run
from engine.spec.kinds import PhaseKind
from engine.spec.phases import EarlyStopSpec
from engine.train.early_stop import judge_fault_reason, stalled, timeout_reason
from engine.train.select_metric import MissingMetric
from engine.train.verl_finish import STOP_FILE, headline, ranking, validated_checkpoints

POLL_S = 5.0
GRACE_S = 60.0
PR_SET_PDEATHSIG = 1
ROLLOUTS_DIR = "traces/verl_rollouts"


class Watch:
    """The early-stop rules a verl run declares, checked against what it has written so far."""

    def __init__(self, run_dir: Path, frozen: FrozenRun) -> None:
        self.run_dir, self.ranking = run_dir, ranking(frozen)
        self.stop: EarlyStopSpec = frozen.early_stop or EarlyStopSpec()
        self.on_metric = bool(frozen.uses("early_stop"))
        # rollout files already read, as they were then: verl rewrites a step's file when a resumed
        # attempt trains that step again, and the step's verdicts are then the new file's
        self.seen: dict[str, tuple[int, int]] = {}
        self.steps: list[tuple[int, list[Any]]] = []  # (step, its rollouts' verdicts), as read
        self.fault: Optional[str] = None  # a judge-fault failure, once one step had too many
        self.recorded = frozen.kind != PhaseKind.repair  # whether every rollout has a reward record

    def reason(self) -> Optional[str]:
        """Why to stop now: an early stop, or (`self.fault` set) a failure."""
        self._read_rollouts()
        return self.fault or self._metric() or self._timeouts()

    def _metric(self) -> Optional[str]:
        if not self.on_metric:
            return None
        name, lower = self.ranking
        try:
            values = [headline(c, name) for c in validated_checkpoints(self.run_dir)]
        except MissingMetric as exc:  # stop now: the hand-off would refuse to rank these checkpoints
            return f"early stopping cannot read its metric: {exc}"
        return stalled(values, f"{name} on the validation data", self.stop, lower=lower)

    def _read_rollouts(self) -> None:
        folder = self.run_dir / ROLLOUTS_DIR
        if not folder.is_dir():
            return
        for path in sorted(folder.glob("*.jsonl"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1):
            if not path.stem.isdigit():
                continue
            try:
                st = path.stat()
            except OSError:
                continue
            if self.seen.get(path.name) == (st.st_mtime_ns, st.st_size):
                continue
            step = int(path.stem)
            verdicts = rollout_verdicts(path, functools.partial(self._reward_verdicts, step))
            if verdicts is None:  # verl writes it from a thread: read it on the next poll
                continue
            self.seen[path.name] = (st.st_mtime_ns, st.st_size)
            self.steps = [(s, v) for s, v in self.steps if s != step] + [(step, verdicts)]
            rate = sum(v == "INTERNAL_ERROR" for v in verdicts) / max(len(verdicts), 1)
            unjudged = sum(v is None for v in verdicts) if self.recorded else 0
            self.fault = self.fault or unjudged_reason(unjudged, len(verdicts), step) or judge_fault_reason(rate, step)

    def _timeouts(self) -> Optional[str]:
        threshold = self.stop.timeout_rate
        if threshold is None:
            return None
        for step, verdicts in self.steps:
            rate = sum(v == "TIMEOUT" for v in verdicts) / max(len(verdicts), 1)
            if reason := timeout_reason(rate, step, threshold):
                return reason
        return None

    def _reward_verdicts(self, step: int) -> dict[str, Any]:
        """The verdict of every training rollout of `step` the run's reward judged, by `rollout_key`."""
        return step_verdicts(read_jsonl(self.run_dir / REWARD_RECORDS), step)


def unjudged_reason(unjudged: int, rollouts: int, step: int) -> Optional[str]:
    """Why training must fail after a step with `unjudged` of its dumped rollouts unseen by the
    reward's records, or None."""
    if not unjudged:
        return None
    return (f"{unjudged} of {rollouts} rollouts of step {step} have no reward record in {REWARD_RECORDS} "
            "(nor a verdict in verl's dump): the judge-fault and timeout rules cannot see their verdicts\n"
            "  fix: the run's reward (engine/reward.py with reward_kwargs.run_config, as launch.sh names it) "
            "records every rollout it scores: find in the run's log what scored these instead, or why its "
            "records were not written (the run directory writable, the disk not full), then re-run to resume "
            "from the last checkpoint")


def step_verdicts(records: Iterable[Mapping[str, Any]], step: int) -> dict[str, Any]:
    """The verdicts the run's reward recorded for the training rollouts of `step`, by `rollout_key`.
    A record without a step (verl's legacy trainer passes none) may be any step's, and one of
    `step` that does not say whether it validated (`validate` None) is joined by its key: verl
    dumps training rollouts only, so it is looked up only where a training rollout has its key."""
    return {r.get("key"): r.get("verdict") for r in records
            if r.get("step") is None or (r.get("step") == step and r.get("validate") is not True)}


def judged_per_step(records: Iterable[Mapping[str, Any]], *, validation: bool = False) -> dict[int, int]:
    """How many training (with `validation`: validation) rollouts of each step the run's reward
    judged: each step's calls of the attempt that judged it last, as a resumed attempt redoes the
    step its predecessor was stopped in. Records that do not say both are left out."""
    last: dict[int, Any] = {}
    counts: dict[tuple[int, Any], int] = {}
    for record in records:
        step, attempt = record.get("step"), record.get("attempt")
        if not isinstance(step, int) or record.get("validate") is not validation:
            continue
        last[step] = attempt
        counts[step, attempt] = counts.get((step, attempt), 0) + 1
    return {step: counts[step, attempt] for step, attempt in sorted(last.items())}


def rollout_verdicts(path: Path, records: Any) -> Optional[list[Any]]:
    """The verdict of each rollout of one step's dump (None for one the reward did not record),
    or None while the dump is still being written. `records()` gives the reward's verdicts by
    `rollout_key`, read only when a row carries none itself."""
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, ValueError):
        return None
    known: Optional[dict[str, Any]] = None
    verdicts = []
    for row in rows:
        if "verdict" not in row and known is None:
            known = records()
        verdicts.append(row["verdict"] if "verdict" in row else
                        known.get(rollout_key(row.get("gts"), row.get("output", ""))))  # type: ignore[union-attr]
    return verdicts



def watch(run_dir: Path, command: list[str], *, poll_s: float = POLL_S, grace_s: float = GRACE_S) -> int:
    """Run `command` to its end, or until an early-stop rule fires (then 0)."""
    rules = Watch(run_dir, read_frozen_run(run_dir))
    child = subprocess.Popen(command, preexec_fn=_term_with_parent(os.getpid()))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    while True:
        reason = rules.reason()
        if rules.fault is not None:
            return _fail(child, rules.fault, grace_s)
        if reason is not None:
            return _stop(run_dir, child, reason, grace_s)
        try:
            return child.wait(timeout=poll_s)
        except subprocess.TimeoutExpired:
            continue


def _term_with_parent(parent: int) -> Optional[Callable[[], None]]:
    """For the command's process, before it execs: SIGTERM when the watcher dies (Linux's
    PR_SET_PDEATHSIG; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the watcher died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)
    return arm


def _stop(run_dir: Path, child: subprocess.Popen, reason: str, grace_s: float) -> int:
    path = run_dir / STOP_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"reason": reason}) + "\n", encoding="utf-8")
    print(f"early stop: {reason}", flush=True)
    _end(child, grace_s)
    return 0


def _fail(child: subprocess.Popen, reason: str, grace_s: float) -> int:
    print(f"error: {reason}", file=sys.stderr, flush=True)
    _end(child, grace_s)
    return 1


def _end(child: subprocess.Popen, grace_s: float) -> None:
    child.terminate()
    try:
        child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _kill_group(child)
        child.wait()


def _kill_group(child: subprocess.Popen) -> None:
    """SIGKILL the command's process group (`timeout` leads one), else the command alone."""
    try:
        if os.getpgid(child.pid) == child.pid:
            os.killpg(child.pid, signal.SIGKILL)
            return
    except ProcessLookupError:
        return
    child.kill()


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.train.verl_watch")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--poll-s", type=float, default=POLL_S, help=argparse.SUPPRESS)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the training command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run (after --)")
    return watch(args.run_dir.resolve(), command, poll_s=args.poll_s)


if __name__ == "__main__":
    sys.exit(main())
