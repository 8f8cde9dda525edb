"""The README matches the command line: every `rlvr-run ...` it shows, in code blocks, the
Commands table and the prose, names a verb that answers `--help`, flags that verb accepts,
values its choices accept; a line written out in full parses as it stands."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from engine.cli import SUBCOMMANDS, _normalize_argv, build_parser, main

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")  # SPEC, N, F, URL: a value the reader fills in


def readme_commands(text: str = README) -> list[str]:
    """Every command line the README shows, as written (a table's `\\|` read as `|`)."""
    found: list[str] = []
    blocks = re.split(r"^```[^\n]*\n", text, flags=re.M)
    for i, chunk in enumerate(blocks):
        if i % 2:  # inside a fence: each line from `rlvr-run`, continuations joined
            for line in chunk.replace("\\\n", " ").splitlines():
                at = line.find("rlvr-run ")
                if at >= 0:
                    found.append(line[at:].split("#")[0].rstrip(") "))
        else:
            found += [m.group(1) for m in re.finditer(r"`(rlvr-run [^`]+)`", chunk)]
    return [" ".join(c.replace("\\|", "|").split()) for c in found]


def _parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Each verb's parser (and `data`'s sub-verbs'), by its words."""
    out: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    for action in build_parser()._subparsers._group_actions:
        for name, parser in action.choices.items():
            out[(name,)] = parser
            for sub in parser._subparsers._group_actions if parser._subparsers else []:
                out.update({(name, n): p for n, p in sub.choices.items()})
    return out


PARSERS = _parsers()


def _tokens(command: str) -> list[str]:
    return [t.strip("[]") for t in command.split()[1:] if t.strip("[]")]


def _verbs(tokens: list[str]) -> list[tuple[str, ...]]:
    """The verb (and sub-verb) paths a command names: `data show|idlist` names two."""
    if not tokens or tokens[0] not in SUBCOMMANDS:
        return [("run",)]
    if tokens[0] == "data" and len(tokens) > 1 and not tokens[1].startswith("-") and not tokens[1] == "...":
        return [("data", sub) for sub in tokens[1].split("|")]
    return [(tokens[0],)]


COMMANDS = [c for c in readme_commands() if not PLACEHOLDER.match(c.split()[1])
            or c.split()[1] in ("SPEC",)]


def test_the_readme_shows_commands_of_every_verb():
    shown = {verb for c in COMMANDS for verb in _verbs(_tokens(c))}
    assert {(v,) for v in SUBCOMMANDS if v != "data"} <= shown
    assert any(v[0] == "data" for v in shown)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_readme_command_names_a_verb_its_flags_and_values(command, capsys):
    tokens = _tokens(command)
    for verb in _verbs(tokens):
        assert verb in PARSERS, f"README shows `{command}`: there is no `rlvr-run {' '.join(verb)}`"
        with pytest.raises(SystemExit) as info:
            main([*verb, "--help"])
        assert info.value.code == 0
        parser = PARSERS[verb]
        options = {s: a for a in parser._actions for s in a.option_strings}
        for i, token in enumerate(tokens):
            flag = token.split("=")[0]
            if not flag.startswith("--"):
                continue
            assert flag in options, f"README shows `{command}`: `rlvr-run {' '.join(verb)}` has no {flag}"
            action = options[flag]
            value = token.split("=", 1)[1] if "=" in token else (tokens[i + 1] if i + 1 < len(tokens) else "")
            if action.choices and value and not value.startswith("-"):
                for choice in value.split("|"):
                    if not PLACEHOLDER.match(choice):
                        assert choice in action.choices, (
                            f"README shows `{command}`: {flag} takes {sorted(action.choices)}, not {choice!r}")
    capsys.readouterr()


CONCRETE = [c for c in COMMANDS if not re.search(r"[\[\]|<>]|\.\.\.|…", c)
            and not any(PLACEHOLDER.match(t) for t in _tokens(c))]


@pytest.mark.parametrize("command", CONCRETE)
def test_a_command_written_out_in_full_parses(command, capsys):
    """Prose may name a verb with some of its options (`rlvr-run judge --mode dense`): a missing
    required argument is no error here; an unknown flag or a refused value is."""
    argv = _normalize_argv(shlex.split(command)[1:])
    try:
        build_parser(argv[:1]).parse_args(argv)
    except SystemExit:
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert "the following arguments are required" in error, f"README shows `{command}`: {error}"


def test_the_extractor_reads_tables_blocks_and_prose():
    text = ("| `rlvr-run evaluate --run-dir D [--backend auto\\|hf]` | x |\n"
            "```bash\nRAY=1 rlvr-run specs/m.yaml --executor ray \\\n    --runs-dir /r  # note\n```\n"
            "prose `rlvr-run judge\n--mode dense` end\n")
    assert readme_commands(text) == ["rlvr-run evaluate --run-dir D [--backend auto|hf]",
                                     "rlvr-run specs/m.yaml --executor ray --runs-dir /r",
                                     "rlvr-run judge --mode dense"]


def test_backend_openai_is_the_server_at_base_url(tmp_path, capsys):
    from engine.cli.evaluate import served_backend

    assert served_backend("openai", "http://127.0.0.1:8000/v1") == "auto"  # the URL alone chooses the server
    assert served_backend("auto", "http://127.0.0.1:8000/v1") == "auto"
    assert served_backend("hf", None) == "hf"
    run_dir = tmp_path / "run"
    assert main(["evaluate", "--run-dir", str(run_dir), "--model", "m", "--backend", "openai"]) == 2
    assert "--backend openai needs --base-url" in capsys.readouterr().err
    assert main(["evaluate", "--run-dir", str(run_dir), "--model", "m", "--backend", "vllm",
                 "--base-url", "http://127.0.0.1:8000/v1"]) == 2
    assert "pick one" in capsys.readouterr().err
