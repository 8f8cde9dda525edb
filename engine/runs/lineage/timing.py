"""How long each run took: its attempts, read from the state changes lineage records.

A run is tried again after a crash, a failure or a Ctrl-C; each try is one attempt, from its
`running` event to the event that ended it (succeeded, failed, cancelled). A run's time is the
sum of its attempts, never its last one alone (`RunRecord.started_at`/`finished_at` are the last
attempt's): the cost page, `price --fit`, forecast against actual and the ETA all read it here.

Each attempt is a typed row of lineage's `attempts` (its number; for a run done in another run's
process, evaluations of one checkpoint sharing one model load, that run, whose process's time is
then shared among the runs it did, `price.study`; whether it was queued), matched to its
`running` event in order. The event's reason (`running_reason`) says the same for people, and is
never read back: an attempt without its row (none recorded) is numbered by its place, its own work.

An executor with a queue (Slurm) submits the attempt at its `running` event, whose reason then
says `queued`; the attempt holds no time until a `running` → `running` event (`began_reason`)
says when its job began on a node: a job PENDING for hours adds nothing to the run's time, its
cost or its pace. An attempt that ended without beginning (cancelled while PENDING) took none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Optional

from engine.runs.lineage.records import AttemptRecord, Event, RunState, parse_iso

_QUEUED = ", queued"


def running_reason(attempt: int, process: Optional[str] = None, *, queued: bool = False) -> str:
    """The reason of an attempt's `running` event (what `run_times` reads back); `queued`: submitted
    to an executor's queue, where it may wait before it begins."""
    return f"attempt {attempt}" + (f" in the process of {process}" if process else "") + (_QUEUED if queued else "")


def began_reason(attempt: int) -> str:
    """The reason of the `running` → `running` event of a queued attempt whose job began."""
    return f"attempt {attempt} began"


@dataclass(frozen=True)
class Attempt:
    number: int
    start: datetime
    end: Optional[datetime]  # None: running now
    ended: Optional[RunState]  # how it ended (None: running now)
    process: Optional[str] = None  # the run whose process did this attempt's work, when not its own
    queued: bool = False  # running now, but still waiting in the executor's queue: no time yet

    def seconds(self, now: Optional[datetime] = None) -> float:
        if self.queued:
            return 0.0
        end = self.end or now or datetime.now(timezone.utc)
        return max(0.0, (end - self.start).total_seconds())


@dataclass(frozen=True)
class RunTime:
    run_id: str
    attempts: tuple[Attempt, ...]

    def seconds(self, now: Optional[datetime] = None) -> float:
        """The sum of the run's attempts (a running one counts up to `now`)."""
        return sum(a.seconds(now) for a in self.attempts)

    @property
    def current(self) -> Optional[Attempt]:
        """The last attempt (the one running now, if any)."""
        return self.attempts[-1] if self.attempts else None

    @property
    def first_start(self) -> Optional[datetime]:
        return self.attempts[0].start if self.attempts else None

    @property
    def last_end(self) -> Optional[datetime]:
        return self.attempts[-1].end if self.attempts else None


def run_times(events: Iterable[Event], attempts: Iterable[AttemptRecord]) -> dict[str, RunTime]:
    """Each run's attempts from its events (in the order lineage recorded them) and its `attempts`
    rows (the n-th `running` event of a run opens its n-th attempt row)."""
    rows: dict[str, list[AttemptRecord]] = {}
    for row in sorted(attempts, key=lambda a: (a.run_id, a.attempt)):
        rows.setdefault(row.run_id, []).append(row)
    opened: dict[str, int] = {}
    open_: dict[str, tuple[int, datetime, Optional[str], bool]] = {}
    done: dict[str, list[Attempt]] = {}
    for event in events:
        when = parse_iso(event.time)
        if when is None:
            continue
        attempts = done.setdefault(event.run_id, [])
        if event.to_state is RunState.running and event.from_state is RunState.running:  # its job began
            if event.run_id in open_:
                number, _, process, _ = open_[event.run_id]
                open_[event.run_id] = (number, when, process, False)
        elif event.to_state is RunState.running:
            nth = opened[event.run_id] = opened.get(event.run_id, 0) + 1
            mine = rows.get(event.run_id, [])
            row = mine[nth - 1] if nth <= len(mine) else None
            open_[event.run_id] = (row.attempt, when, row.leader, row.queued) if row else (
                len(attempts) + 1, when, None, False)
        elif event.run_id in open_:
            number, start, process, queued = open_.pop(event.run_id)
            start = when if queued else start  # ended without beginning: it held nothing
            attempts.append(Attempt(number=number, start=start, end=max(when, start), ended=event.to_state,
                                    process=process))
    for run_id, (number, start, process, queued) in open_.items():
        done[run_id].append(Attempt(number=number, start=start, end=None, ended=None, process=process, queued=queued))
    return {run_id: RunTime(run_id=run_id, attempts=tuple(a)) for run_id, a in done.items()}
