"""Every message prints exactly what it says: the fixes and hints the product prints carry
brackets (`allow: [{rule: 3, datasets: [a, b]}]`, `pip install 'rlvr-run[semantic]'`) that a
console reading markup would take for tags and drop. Each is rendered through the real command
line and compared with the text the library built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.data.files import write_problems
from engine.data.toy import toy_problems
from engine.errors import SpecError
from engine.isolation.semantic import INSTALL_HINT
from engine.isolation.validate import validate_spec

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "tests" / "specs" / "bad"

LEAKY = """\
name: leaky
base_model: qwen2.5-coder-0.5b-instruct
datasets:
  toy_train: {{source: local_jsonl, path: train.jsonl, fields: {{format: problem}}, role: train}}
  toy_test:  {{source: local_jsonl, path: test.jsonl, fields: {{format: problem}}, ids: test_ids.txt, role: test, test_only: true}}
protocols:
  greedy: {{preset: greedy}}
phases:
  base: {{kind: eval}}
  sft:  {{kind: sft, from: base, trainer: trl, train: toy_train}}
seeds: [1]
evaluate:
  final: {{datasets: [toy_test], protocol: greedy}}
leakage: {{semantic: {semantic}}}
"""


def _leaky_spec(folder: Path, *, semantic: bool = False) -> Path:
    """Training data that holds the test set's first problems word for word: a rule-3 refusal."""
    test = toy_problems("test")[:6]
    write_problems([*toy_problems("train")[:6], *test[:2]], folder / "train.jsonl")
    write_problems(test, folder / "test.jsonl")
    (folder / "test_ids.txt").write_text("".join(p.id + "\n" for p in test))
    spec = folder / "spec.yaml"
    spec.write_text(LEAKY.format(semantic=str(semantic).lower()))
    return spec


def _printed(capsys) -> str:
    captured = capsys.readouterr()
    return captured.out + captured.err


def _unwrapped(text: str) -> str:
    return " ".join(text.split())


def test_a_rule_3_refusal_prints_its_waiver_with_the_dataset_list(tmp_path, capsys):
    spec = _leaky_spec(tmp_path)
    with pytest.raises(SpecError) as info:
        validate_spec(spec)
    (diag,) = info.value.diagnostics
    assert "datasets: [toy_train, toy_test]" in diag.fix  # what the library says

    assert main(["validate", str(spec)]) == 1
    assert _unwrapped(diag.fix) in _unwrapped(_printed(capsys))

    assert main(["data", "leakage", str(spec), "--cache-dir", str(tmp_path / "cache")]) == 1
    assert _unwrapped(diag.fix) in _unwrapped(_printed(capsys))

    assert main([str(spec), "--dry-run", "--runs-dir", str(tmp_path / "runs")]) == 1
    assert _unwrapped(diag.fix) in _unwrapped(_printed(capsys))


@pytest.mark.parametrize("name", ["rule1_direct.yaml", "rule2.yaml", "rule4.yaml", "bad_enum.yaml",
                                  "dangling_dataset.yaml", "kind_requirements.yaml"])
def test_spec_errors_print_every_diagnostic_verbatim(name, capsys):
    with pytest.raises(SpecError) as info:
        validate_spec(BAD / name, content=False)
    assert main(["validate", "--no-content", str(BAD / name)]) == 1
    printed = _unwrapped(_printed(capsys))
    for diag in info.value.diagnostics:
        assert _unwrapped(diag.render()) in printed


def test_rule_3_warnings_and_the_semantic_hint_print_as_the_json_says(tmp_path, capsys):
    """`data leakage --json` puts the report on stdout and the terminal lines on stderr: every
    warning and error the JSON holds is on stderr, character for character."""
    spec = _leaky_spec(tmp_path, semantic=True)
    main(["data", "leakage", str(spec), "--cache-dir", str(tmp_path / "cache"), "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    err = _unwrapped(captured.err)
    assert report["warnings"] or report["errors"]
    for line in [*report["warnings"], *report["errors"]]:
        assert _unwrapped(line) in err
    if report["semantic"].startswith("did not run"):  # the optional extra is not installed here
        assert INSTALL_HINT in err and "'rlvr-run[semantic]'" in err


def test_validate_warnings_keep_their_brackets(tmp_path, capsys):
    spec = _leaky_spec(tmp_path, semantic=True)
    (tmp_path / "train.jsonl").write_text((tmp_path / "train.jsonl").read_text().splitlines(True)[0])
    code = main(["validate", str(spec)])
    printed = _printed(capsys)
    if "semantic stage did not run" in printed:
        assert code == 0 and INSTALL_HINT in _unwrapped(printed)


def test_user_errors_and_their_fix_print_verbatim(tmp_path, capsys):
    runs = tmp_path / "[bold]runs[/bold]"
    assert main(["report", "--runs-dir", str(runs)]) == 2
    assert f"{runs}/lineage.sqlite" in _unwrapped(_printed(capsys))

    verdicts = tmp_path / "[red]verdicts[/].jsonl"
    assert main(["data", "pairs", "--problems", "p.jsonl", "--samples", "s.jsonl", "--verdicts", str(verdicts),
                 "--out", str(tmp_path / "pairs.jsonl"), "--timeout", "2"]) == 2
    assert f"--verdicts {verdicts}" in _unwrapped(_printed(capsys))


def test_the_console_reads_no_markup():
    from engine.cli.views import console, err_console, make_console

    for out in (console, err_console, make_console()):
        with out.capture() as captured:
            out.print("pip install 'rlvr-run[semantic]' [bold]x[/bold] :smile:", soft_wrap=True)
        assert captured.get().strip() == "pip install 'rlvr-run[semantic]' [bold]x[/bold] :smile:"
