"""What a spec's YAML may be before it is built into Python objects: bounded and plain.

One pass over the parser's events (ruamel's parser is a state machine; its composer and
constructor recurse, and aliases share nodes that every later walk expands) refuses what would
end in a traceback or a hang further on:

- a key that is a list or a mapping (`? [a, b]`, `{hf_id: [a]}: 1`): Python cannot hash it;
- nesting deeper than `MAX_DEPTH`: the composer would hit Python's recursion limit;
- more than `MAX_NODES` values once every alias is expanded (a "billion laughs" of 1 KB is a
  million values): counted per anchor as the events stream, so the count itself is linear;
- an alias inside the value its anchor names (`a: &x [*x]`): a value containing itself;
- tags beyond YAML's plain types (`!!binary`, `!!python/...`, `!custom`): no spec value has one;
- an integer too long for Python to read (over 4300 digits).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable, Optional

from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    Event,
    MappingStartEvent,
    ScalarEvent,
)

# A spec nests about 8 levels (phases.grpo.overrides.actor_rollout_ref.actor.optim.lr).
MAX_DEPTH = 64
# The largest spec shipped expands to about 1,500 values.
MAX_NODES = 50_000
MAX_BYTES = 4 * 1024 * 1024
# Python refuses to read an int of more than 4300 digits (sys.int_info.default_max_str_digits).
MAX_DIGITS = 4000
PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")} | {"!"}
_INT = re.compile(r"[-+]?[0-9][0-9_]*")


@dataclass(frozen=True)
class Problem:
    line: int  # 1-based
    col: int
    message: str
    fix: str


@dataclass
class _Open:
    anchor: str | None
    mapping: bool
    size: int = 1  # this collection's own node
    expect_key: bool = True


def tagged_value(tag: str, value: str) -> object:
    """A scalar with a plain tag (`!!int "5"`, `!!str 5`) as YAML's safe loader builds it; raises
    ValueError when the text is not of that type (`!!int x`)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    if tag in ("!", "tag:yaml.org,2002:str"):
        return value
    try:
        return YAML(typ="safe", pure=True).load(f"!<{tag}> {json.dumps(value)}")
    except (YAMLError, ValueError, TypeError) as exc:
        raise ValueError(str(exc)) from None


# A run of flow openers past MAX_DEPTH: ruamel's scanner keeps every unclosed opener as a
# possible key and re-checks them all for each token it reads ahead, so the full text costs
# quadratic time before the first event past the bound arrives; its prefix through the run
# yields the same events up to there, at once.
_DEEP_RUN = re.compile(r"(?:[\[{]\s*){%d}" % (MAX_DEPTH + 1))


def too_deep_prefix(text: str) -> Optional[str]:
    """The text through its first run of more than MAX_DEPTH flow openers, or None. Parsing it
    proves the nesting when the run is real YAML structure (not inside a quoted or block scalar)."""
    run = _DEEP_RUN.search(text)
    return text[:run.end()] if run else None


def _at(event: Event, message: str, fix: str) -> Problem:
    return Problem(event.start_mark.line + 1, event.start_mark.column + 1, message, fix)


def shape_problems(events: Iterable[Event]) -> list[Problem]:
    """The first problem of each kind found (one is enough to refuse; the rest would repeat it)."""
    sizes: dict[str, int] = {}  # anchor → expanded size of its node
    collection_anchors: set[str] = set()
    stack: list[_Open] = []
    total = 0
    out: dict[str, Problem] = {}

    def item(event: Event, size: int, collection: bool) -> None:
        nonlocal total
        total += size
        if stack:
            parent = stack[-1]
            if parent.mapping:
                if parent.expect_key and collection and "key" not in out:
                    out["key"] = _at(event, "a key must be a plain name, not a list or mapping",
                                     "write the key as a plain word (quote it if it holds brackets or braces)")
                parent.expect_key = not parent.expect_key

    for event in events:
        tag = getattr(event, "tag", None)
        if tag is not None and str(tag) not in PLAIN_TAGS and "tag" not in out and isinstance(
                event, (ScalarEvent, CollectionStartEvent)):
            shown = str(tag).replace("tag:yaml.org,2002:", "!!")
            out["tag"] = _at(event, f"YAML tag {shown} is not part of a spec (only plain values are)",
                             "remove the tag and write the value plainly (quote it to make it text)")
        if (isinstance(event, ScalarEvent) and tag is not None and str(tag) in PLAIN_TAGS and "tag" not in out):
            try:
                tagged_value(str(tag), event.value)
            except ValueError:
                shown = str(tag).replace("tag:yaml.org,2002:", "!!")
                out["tag"] = _at(event, f"{event.value[:40]!r} is not what its tag {shown} says",
                                 f"drop the tag {shown}, or write a value of that type")
        if isinstance(event, CollectionStartEvent):
            item(event, 0, True)
            stack.append(_Open(anchor=event.anchor, mapping=isinstance(event, MappingStartEvent)))
            if len(stack) > MAX_DEPTH:
                return [_at(event, f"values nested more than {MAX_DEPTH} levels deep",
                            "a spec nests a few levels: close the brackets that are left open, or flatten it")]
        elif isinstance(event, CollectionEndEvent):
            done = stack.pop()
            if done.anchor is not None:
                sizes[done.anchor] = done.size
                collection_anchors.add(done.anchor)
            if stack:
                stack[-1].size += done.size
        elif isinstance(event, (ScalarEvent, AliasEvent)):
            alias = isinstance(event, AliasEvent)
            if alias and any(o.anchor == event.anchor for o in stack):
                return [_at(event, f"alias *{event.anchor} is inside its own anchor &{event.anchor}: the value "
                            "would contain itself forever", f"move *{event.anchor} out of the value it names")]
            size = sizes.get(event.anchor, 1) if alias else 1
            item(event, size, alias and event.anchor in collection_anchors)
            if stack:
                stack[-1].size += size
            if not alias and event.anchor is not None:
                sizes[event.anchor] = 1
            if (not alias and event.style is None and len(event.value) > MAX_DIGITS
                    and _INT.fullmatch(event.value) and "digits" not in out):
                out["digits"] = _at(event, f"a number of {len(event.value)} digits",
                                    "write a number of a sensible size")
        if total > MAX_NODES:
            return [_at(event, f"the spec expands to more than {MAX_NODES:,} values (its aliases `*name` "
                        "repeat what their anchors hold)",
                        "write the values out, or use fewer and smaller aliases")]
    return list(out.values())
