"""Resources as the machine has them: the GPUs it shows are the default, a CUDA_VISIBLE_DEVICES
narrower than what is asked for is an error naming both, and a job's script gets the GPUs and
CPUs it holds in its environment (RLVR_CPUS, which the judge and the trainers read)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import UserError
from engine.resources import visible_gpus
from engine.runs.executors.base import Job
from engine.runs.executors.local import LocalExecutor


def test_the_gpus_shown_are_the_default(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3,5")
    assert visible_gpus() == ["2", "3", "5"] and LocalExecutor().gpus == 3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert LocalExecutor().gpus == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,-1,1")  # CUDA stops at the first invalid entry
    assert visible_gpus() == ["0"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert visible_gpus() == []
    monkeypatch.setattr(Path, "glob", lambda self, pattern: [Path("/dev/nvidia0"), Path("/dev/nvidia1")]
                        if str(self) == "/dev" else [])  # a machine of two GPUs
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # CUDA stops at index 2: the machine lacks it
    assert visible_gpus() == ["0", "1"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert LocalExecutor().gpus == len(list(Path("/dev").glob("nvidia[0-9]*")))  # 0 on a CPU machine


def test_asking_for_more_gpus_than_cuda_visible_devices_shows_is_an_error(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    with pytest.raises(UserError, match=r"4 GPU\(s\) asked for \(--gpus 4\) but CUDA_VISIBLE_DEVICES='2,3' shows 2\n"
                                        r"  fix: pass --gpus 2, or widen CUDA_VISIBLE_DEVICES to 4 GPUs"):
        LocalExecutor(gpus=4)


def test_a_job_gets_the_gpus_and_cpus_it_holds(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6,7")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "launch.sh").write_text('echo "$CUDA_VISIBLE_DEVICES $RLVR_CPUS $OMP_NUM_THREADS" > seen\n')
    executor = LocalExecutor(gpus=3, cpus=8)
    started = executor.start(Job(id="r1", run_dir=run_dir, kind="sft", gpus=2, cpus=3), attempt=1,
                             log_path=run_dir / "logs" / "attempt-1.log")
    while executor.poll(started) is None:
        pass
    assert (run_dir / "seen").read_text().split() == ["4,6", "3", "3"]
