"""Where a study's files are, as its pages link them: relative to the report folder, so pages
copied with their runs folder still resolve, and no page names a machine's folders."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from engine.report.portable import PathReplacer
from engine.report.study import Study
from engine.runs.lineage import RunRecord


class Places:
    """Where a study's files are, as its pages link them: relative to the report folder, so that
    pages copied with their runs folder still resolve, and no page names a machine's folders."""

    def __init__(self, study: Study, out: Path) -> None:
        self.out = Path(out).resolve()
        # a run's folder is `runs/<spec>/<run id>` (materialize); lineage records where it was
        # made, which a copied study no longer is: the run id finds it
        self.moved: dict[str, str] = {str(run.run_dir): self.relative(self.out.parent / run.id)
                                      for run in study.runs if run.run_dir}
        for root in {self.out.parent.parent, Path(os.path.abspath(out)).parent.parent}:  # resolved or as given
            self.moved[str(root)] = self.relative(root)
        if study.spec and study.spec.path:
            self.moved[study.spec.path] = spec_name(study)
        self.moved[str(Path.home())] = "~"
        self._replacer = PathReplacer(self.moved)  # longest first, and only whole paths

    def relative(self, path: Path) -> str:
        return Path(os.path.relpath(Path(path).resolve(), self.out)).as_posix()

    def folder(self, run: RunRecord) -> Optional[Path]:
        found = self.out.parent / run.id
        return found if found.is_dir() else None

    def run(self, run: RunRecord) -> str:
        folder = self.folder(run)
        return f"[{run.id}]({self.relative(folder)}/)" if folder else run.id

    def log(self, run: RunRecord) -> str:
        """The run's latest attempt's log, linked, or — when it has none."""
        folder = self.folder(run)
        logs = sorted((folder / "logs").glob("attempt-*.log"), key=_attempt) if folder else []
        return f"[{logs[-1].name}]({self.relative(logs[-1])})" if logs else "—"

    def portable(self, text: str) -> str:
        """`text` with every folder of this machine the study knows replaced by its relative path
        (a failed run's reason names its log; an unreadable run's error its folder)."""
        return self._replacer.sub(text)


def _attempt(path: Path) -> int:
    digits = path.stem.rpartition("-")[2]
    return int(digits) if digits.isdigit() else 0


def spec_name(study: Study) -> str:
    return Path(study.spec.path).name if study.spec and study.spec.path else study.name
