"""The command line starts at once: `rlvr-run --help` imports no verb, and `status` none of the
heavy libraries (each costs from a tenth of a second to several seconds to import).

Checked in a fresh interpreter, by what is in `sys.modules`: behaviour, not timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "pandas", "scipy", "matplotlib", "datasketch", "numpy", "httpx")


def loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nimport json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout.splitlines()[-1])


def heavy_in(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in HEAVY]


def test_importing_the_cli_loads_no_heavy_library_and_no_verb():
    modules = loaded_after("import engine.cli")
    assert not heavy_in(modules)
    assert not [m for m in modules if m.startswith("engine.cli.")]


def test_help_loads_no_verb():
    modules = loaded_after("import engine.cli, contextlib, io\n"
                           "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
                           "    engine.cli.main(['--help'])")
    assert not heavy_in(modules)
    assert not [m for m in modules if m.startswith("engine.cli.")]


def test_the_version_is_looked_up_only_when_asked():
    help_modules = loaded_after("import engine.cli, contextlib, io\n"
                                "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
                                "    engine.cli.main(['--help'])")
    assert "importlib.metadata" not in help_modules  # a tenth of a second at every start
    out = subprocess.run([sys.executable, "-m", "engine.cli", "--version"], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and out.stdout.startswith("rlvr-run ")


def test_a_verb_loads_only_its_own_module():
    modules = loaded_after("import engine.cli\nengine.cli.build_parser(['status'])")
    views = {"engine.cli.views", "engine.cli.status_view"}  # what the verbs draw with, not verbs
    verbs = {m for m in modules if m.startswith("engine.cli.") and m not in views}
    assert verbs == {"engine.cli.status"}


def test_judge_loads_no_lineage():
    # the study progress view needs lineage's states; judging a file of samples never does
    modules = loaded_after("import engine.cli.judge")
    assert not [m for m in modules if m.startswith("engine.runs.lineage")]


def test_status_loads_no_heavy_library(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "report"))
    from synthetic import build

    build(tmp_path, seeds=1, problems=2)
    modules = loaded_after("import engine.cli, contextlib, io\n"
                           "with contextlib.redirect_stdout(io.StringIO()):\n"
                           f"    engine.cli.main(['status', '--runs-dir', {str(tmp_path)!r}])")
    assert "engine.runs.lineage.store" in modules
    assert not heavy_in(modules)
    # nor the spec's schema, the plan's models or the forecast: a finished study reads its lineage only
    assert not {"engine.spec.model", "engine.spec.validated", "engine.plan.model", "engine.price.progress",
                "engine.spec.registry"} & set(modules)
