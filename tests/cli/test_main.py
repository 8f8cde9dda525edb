"""The CLI is documented: every command and sub-command has help text and a README mention.

The sqlite-utils idea: a command nobody can discover is a command nobody uses.
"""

from __future__ import annotations

import argparse

import pytest

from engine.cli import SUBCOMMANDS, build_parser, main

README = (__import__("pathlib").Path(__file__).resolve().parents[2] / "README.md").read_text()


def _commands() -> list[tuple[str, argparse.ArgumentParser, str]]:
    out = []
    top = build_parser()
    for action in top._subparsers._group_actions:  # the one sub-parsers action
        helps = {a.dest: a.help for a in action._choices_actions}
        for name, parser in action.choices.items():
            out.append((name, parser, helps.get(name) or ""))
            for sub in parser._subparsers._group_actions if parser._subparsers else []:
                sub_helps = {a.dest: a.help for a in sub._choices_actions}
                out += [(f"{name} {n}", p, sub_helps.get(n) or "") for n, p in sub.choices.items()]
    return out


@pytest.mark.parametrize("name,parser,help_text", _commands(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_command_has_help_and_readme_mention(name, parser, help_text):
    assert help_text.strip(), f"`rlvr-run {name}` has no help text"
    words = name.split()
    assert f"rlvr-run {name}" in README or (len(words) == 2 and words[1] in README.split("rlvr-run data", 1)[-1]), \
        f"`rlvr-run {name}` is not documented in README.md"
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"`rlvr-run {name}` option {action.option_strings[0]} has no help text"


def test_every_top_level_verb_is_a_known_subcommand():
    assert {n for n, _, _ in _commands() if " " not in n} == set(SUBCOMMANDS)


def test_no_arguments_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "usage: rlvr-run" in capsys.readouterr().out
