"""Open a lineage database: create it, refuse a newer rlvr-run's schema, apply pending migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from engine.errors import UserError
from engine.runs.lineage.migrations import MIGRATIONS
from engine.runs.lineage.sqlite import Database
from engine.runs.lineage.store import Lineage

LINEAGE_FILE = "lineage.sqlite"


def _connect(path: Path, *, readonly: bool) -> Database:
    # A reader opens read-write but query-only: a mode=ro connection to a WAL database
    # leaves -wal/-shm files behind, while a read-write one removes them when it closes last.
    conn = sqlite3.connect(f"file:{path}?mode={'rw' if readonly else 'rwc'}", uri=True, timeout=30, check_same_thread=False)
    if readonly:
        conn.execute("PRAGMA query_only = ON")
    return Database(conn)


def _check_known_migrations(db: Database, path: Path) -> None:
    # Every registered migration is pending on an empty database: that is the known set.
    known = {m.name for m in MIGRATIONS.pending(Database(memory=True))}
    unknown = [m.name for m in MIGRATIONS.applied(db) if m.name not in known]
    if unknown:
        raise UserError(
            f"{path} was written by a newer rlvr-run (schema migrations {', '.join(unknown)} "
            "are unknown here); upgrade rlvr-run or use another runs directory"
        )


def open_lineage(path: Path | str, *, readonly: bool = False, pending_ok: bool = False) -> Lineage:
    """Open (creating and migrating unless `readonly`) the lineage database at `path`.
    `pending_ok`: a read-only reader of the columns every schema has (`run_states`) accepts an
    older schema, which only a writer upgrades."""
    path = Path(path)
    if readonly and not path.exists():
        raise UserError(f"no lineage at {path}: nothing has run yet")
    if not readonly:
        path.parent.mkdir(parents=True, exist_ok=True)
    db = _connect(path, readonly=readonly)
    _check_known_migrations(db, path)
    if readonly:
        pending = [m.name for m in MIGRATIONS.pending(db)]
        if pending and not pending_ok:
            raise UserError(
                f"{path} uses an older lineage schema (pending: {', '.join(pending)}); "
                "run `rlvr-run SPEC` once to upgrade it"
            )
    else:
        db.enable_wal()
        MIGRATIONS.apply(db)  # each in a transaction with its record: an old database upgrades
    return Lineage(db=db, path=path, readonly=readonly)
