"""The real vLLM source's download on a fresh clone: CI's test workers ask for it at once, and one
copy is downloaded and unpacked whole, which every worker then reads. pip runs for real, on a
local index (a wheel of the same name built here): the download from PyPI is what a test cannot
do twice a run."""

from __future__ import annotations

import subprocess
import threading
import zipfile

from tests.evaluate.conftest import vllm_source


def _wheel(folder, version: str) -> None:
    meta = f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
    with zipfile.ZipFile(folder / f"vllm-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr("vllm/__init__.py", "")
        wheel.writestr("vllm/_version.py", f"__version__ = {version!r}\n")
        for n in range(200):  # enough files that an unpack takes a while
            wheel.writestr(f"vllm/part{n}.py", "x = 1\n" * 200)
        wheel.writestr(f"vllm-{version}.dist-info/METADATA", meta)
        wheel.writestr(f"vllm-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"vllm-{version}.dist-info/RECORD", "")


def test_workers_asking_at_once_get_one_whole_copy(tmp_path, monkeypatch):
    index = tmp_path / "index"
    index.mkdir()
    _wheel(index, vllm_source.VERSION)
    monkeypatch.setenv("RLVR_VLLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    downloads: list[object] = []
    real_run = subprocess.run

    def counted(*args, **kwargs):
        downloads.append(args)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(vllm_source.subprocess, "run", counted)
    got, errors = [], []

    def ask() -> None:
        try:
            got.append(vllm_source.source())
        except Exception as exc:  # noqa: BLE001 (the assertion names it)
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors and len(got) == 3 and len(set(got)) == 1
    assert len(downloads) == 1  # one download, read by all
    assert vllm_source.installed_version(got[0]) == vllm_source.VERSION
    assert len(list((got[0] / "vllm").glob("part*.py"))) == 200
