"""Load a spec file: ruamel.yaml (keeps every node's line/col) → pydantic → Diagnostics.

Every problem becomes a `Diagnostic` naming file:line:col, the dotted key path,
what is wrong in plain words and the fix; all of them are raised together in one
`SpecError`. Nothing a user can write produces a traceback.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, TypeVar

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from engine.errors import Diagnostic, SpecError
from engine.spec.model import Spec
from engine.spec.schema_errors import describe_pydantic_errors
from engine.spec.yaml_bounds import MAX_BYTES, shape_problems, tagged_value, too_deep_prefix

Key = str | int
M = TypeVar("M", bound=BaseModel)


class Positions:
    """Line/col of every key in the parsed YAML tree (1-based, like editors)."""

    def __init__(self, root: Any) -> None:
        self._root = root

    def _walk(self, keys: tuple[Key, ...]) -> tuple[tuple[int, int], Optional[tuple[int, int]]]:
        """Position of the deepest existing key, and of its value when the whole path exists."""
        node, pos, value_pos = self._root, (1, 1), None
        for i, key in enumerate(keys):
            if isinstance(node, CommentedMap) and key in node:
                (line, col), (vline, vcol) = _map_key_position(node, key)
            elif isinstance(node, CommentedSeq) and isinstance(key, int) and 0 <= key < len(node):
                line, col = vline, vcol = node.lc.item(key)
            else:
                return pos, None
            pos, node = (line + 1, col + 1), node[key]
            if i == len(keys) - 1:
                value_pos = (vline + 1, vcol + 1)
        return pos, value_pos

    def locate(self, *keys: Key) -> tuple[int, int]:
        """The key at this path, else its nearest existing parent."""
        return self._walk(keys)[0]

    def found(self, *keys: Key) -> bool:
        """Whether at least the first key of the path exists (else positions fall back to 1:1)."""
        return not keys or self._walk(keys[:1])[1] is not None

    def locate_value(self, *keys: Key) -> tuple[int, int]:
        """The value at this path (where a wrong value starts), else `locate`."""
        key_pos, value_pos = self._walk(keys)
        return value_pos or key_pos


def _map_key_position(node: CommentedMap, key: Key) -> tuple[tuple[int, int], tuple[int, int]]:
    """Key and value position (0-based) of `key`; a key brought in by a `<<` merge is found
    where it is written, in the merged (anchored) mapping, not in the mapping that merges it."""
    if key in node.lc.data:
        return node.lc.key(key), node.lc.value(key)
    for source in getattr(node, "merge", ()):
        source = source[1] if isinstance(source, tuple) else source  # (index, map) in older ruamel
        if isinstance(source, CommentedMap) and key in source:
            return _map_key_position(source, key)
    line, col = node.lc.line, node.lc.col
    return (line, col), (line, col)


@dataclass(kw_only=True)
class LoadedSpec:
    path: Path
    text: str
    sha256: str  # of the file's bytes
    data: dict[str, Any]  # plain python data, as written
    spec: Spec
    positions: Positions

    def locate(self, *keys: Key) -> tuple[int, int]:
        return self.positions.locate(*keys)

    def diagnostic(self, keys: tuple[Key, ...], message: str, fix: str = "", *,
                   rule: str = "", at_value: bool = False) -> Diagnostic:
        """A Diagnostic pointing at `keys` in this spec, with a code frame."""
        return make_diagnostic(self.path, self.text, self.positions, keys, message, fix,
                               rule=rule, at_value=at_value)


def make_diagnostic(path: Path, text: str, positions: Positions, keys: tuple[Key, ...],
                    message: str, fix: str = "", *, rule: str = "", at_value: bool = False) -> Diagnostic:
    line, col = positions.locate_value(*keys) if at_value else positions.locate(*keys)
    snippet = code_frame(text, line, col) if positions.found(*keys) else ""
    return Diagnostic(file=str(path), line=line, col=col, path=dotted(keys), message=message,
                      fix=fix, rule=rule, snippet=snippet)


def dotted(keys: tuple[Key, ...]) -> str:
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out or "(spec)"


FRAME_WIDTH = 160


def code_frame(text: str, line: int, col: int) -> str:
    """The offending line with a caret under the offending token (an editor-like frame)."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return ""
    src = lines[line - 1]
    if len(src) > FRAME_WIDTH:  # a huge scalar: show the window around the column
        start = max(0, col - 1 - FRAME_WIDTH // 2)
        src, col = src[start:start + FRAME_WIDTH], col - start
    token = src[col - 1:]
    width = next((i for i, ch in enumerate(token) if ch in " ,}]\t#"), len(token)) or 1
    gutter = f"{line:>5} | "
    return f"{gutter}{src}\n{' ' * (len(gutter) - 2)}| {' ' * (col - 1)}{'^' * width}"


# ---------------------------------------------------------------- reading and parsing
def _file_error(path: Path, message: str, fix: str) -> SpecError:
    return SpecError([Diagnostic(file=str(path), line=1, col=1, path="(file)", message=message, fix=fix)])


def read_text(path: Path) -> str:
    if not path.exists():
        raise _file_error(path, "spec file not found", "check the path; specs usually live in specs/*.yaml")
    if path.is_dir():
        raise _file_error(path, "this is a directory, not a spec file", f"name a YAML file inside it, e.g. {path}/matrix.yaml")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _file_error(path, f"not UTF-8 text (byte {exc.start})", "save the spec as UTF-8 YAML") from None
    except OSError as exc:
        raise _file_error(path, f"cannot read the file: {exc.strerror}", "check its permissions") from None


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    # Duplicates are reported by `_duplicate_keys` with both lines, alongside every other error.
    yaml.allow_duplicate_keys = True
    return yaml


def _yaml_error(path: Path, text: str, exc: YAMLError) -> Diagnostic:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    if isinstance(exc, MarkedYAMLError):
        what = exc.problem or exc.context or "unreadable"
        start = exc.context_mark
        if exc.context and start is not None and (start.line, start.column) != (mark.line, mark.column):
            what += f" ({exc.context} that starts at line {start.line + 1}, column {start.column + 1})"
    else:
        what = str(exc).splitlines()[0]
    return Diagnostic(file=str(path), line=line, col=col, path="(yaml)",
                      message=f"invalid YAML: {what}",
                      fix="fix the YAML syntax here (indentation, a missing ':' or closing bracket, tabs)",
                      snippet=code_frame(text, line, col))


def _duplicate_keys(node: Optional[Node], keys: tuple[Key, ...], path: Path, text: str) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    if isinstance(node, MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            line, col = key_node.start_mark.line + 1, key_node.start_mark.column + 1
            if not isinstance(key_node, ScalarNode):  # refused by `shape_problems` before composing
                continue
            key = key_node.value
            if key in seen:
                out.append(Diagnostic(
                    file=str(path), line=line, col=col, path=dotted((*keys, key)),
                    message=f"duplicate key {key!r} (first defined at line {seen[key]}); YAML would silently keep one",
                    fix=f"rename or remove one of the two {key!r} entries (lines {seen[key]} and {line})",
                    snippet=code_frame(text, line, col)))
            else:
                seen[key] = line
            out += _duplicate_keys(value_node, (*keys, key), path, text)
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            out += _duplicate_keys(item, (*keys, i), path, text)
    return out


def plain(data: Any) -> Any:
    """ruamel's round-trip types → plain dict/list/str/int/float/bool."""
    if isinstance(data, dict):
        # Keys are scalars (`shape_problems` refuses the rest); a date or a tagged one becomes text.
        return {(k if isinstance(k, (str, int, float, bool)) or k is None else str(k)): plain(v)
                for k, v in data.items()}
    if isinstance(data, list):
        return [plain(v) for v in data]
    if isinstance(data, TaggedScalar):  # `!!str 5`, `!!float 1`: `shape_problems` checked the tag and value
        return tagged_value(str(data.tag), data.value)
    if isinstance(data, bool) or data is None:
        return data
    for kind in (str, int, float):
        if isinstance(data, kind):
            return kind(data)
    return data


def _too_deep(text: str) -> list[Any]:
    """The shape problems of the text through its first over-deep run of flow openers: the same
    events as the whole text up to there, found in linear time (see `too_deep_prefix`). Empty
    when there is no such run or it is not structure (the prefix then fails to parse)."""
    prefix = too_deep_prefix(text)
    if prefix is None:
        return []
    try:
        return shape_problems(_yaml().parse(prefix))
    except YAMLError:
        return []


def parse_yaml(path: Path, text: str) -> tuple[Any, Positions, list[Diagnostic]]:
    """The raw tree and positions, plus YAML-level problems (syntax, duplicates, not a mapping)."""
    if len(text) > MAX_BYTES:
        return None, Positions(None), [_file_error(path, f"the spec is {len(text):,} characters long",
                                                   "a spec is a few KB: keep data in dataset files").diagnostics[0]]
    yaml = _yaml()
    try:
        shape = _too_deep(text) or shape_problems(yaml.parse(text))
        if shape:  # building these would raise or hang: nothing more can be read
            return None, Positions(None), [
                Diagnostic(file=str(path), line=p.line, col=p.col, path="(yaml)", message=p.message, fix=p.fix,
                           snippet=code_frame(text, p.line, p.col)) for p in shape]
        diags = _duplicate_keys(yaml.compose(text), (), path, text)
        tree = _yaml().load(text)
    except YAMLError as exc:
        return None, Positions(None), [_yaml_error(path, text, exc)]
    positions = Positions(tree)
    if tree is None:
        diags.append(Diagnostic(file=str(path), line=1, col=1, path="(spec)", message="the spec is empty",
                                fix="write at least: name, base_model, datasets, phases, seeds (see specs/matrix.yaml)"))
    elif not isinstance(tree, dict):
        diags.append(Diagnostic(file=str(path), line=1, col=1, path="(spec)",
                                message=f"the top level must be a mapping of keys, not a {type(plain(tree)).__name__}",
                                fix="start the file with `name: ...`, `base_model: ...` etc. (see specs/matrix.yaml)",
                                snippet=code_frame(text, 1, 1)))
    return tree, positions, diags


# ---------------------------------------------------------------- loading
@dataclass(kw_only=True)
class ParsedSpec:
    """What could be read from a spec, even a broken one: used to report every problem at once."""

    path: Path
    text: str
    sha256: str
    data: Any
    positions: Positions
    spec: Optional[Spec]  # None when the schema did not validate
    # The spec minus the fields (else the entries) with schema errors, when that
    # validates: enough to check references and report them alongside the schema errors.
    partial: Optional[Spec]
    diagnostics: list[Diagnostic]
    # Entries ("phases.grpo") that lost a field in `partial`: what they now lack is
    # not the user's omission, so requirement checks on them are moot.
    pruned: frozenset[str] = frozenset()

    def diagnostic(self, keys: tuple[Key, ...], message: str, fix: str = "", **kw: Any) -> Diagnostic:
        return make_diagnostic(self.path, self.text, self.positions, keys, message, fix, **kw)

    def loaded(self) -> LoadedSpec:
        assert self.spec is not None
        return LoadedSpec(path=self.path, text=self.text, sha256=self.sha256, data=self.data,
                          spec=self.spec, positions=self.positions)


def parse_spec(path: Path) -> ParsedSpec:
    """Read, parse and schema-check `path`; never raises for bad content (only for an unreadable file)."""
    path = Path(path)
    text = read_text(path)
    tree, positions, diags = parse_yaml(path, text)
    data = plain(tree)
    spec: Optional[Spec] = None
    partial: Optional[Spec] = None
    pruned: frozenset[str] = frozenset()
    if isinstance(data, dict):
        try:
            spec = partial = Spec.model_validate(data)
        except ValidationError as exc:
            for keys, message, fix, at_value in describe_pydantic_errors(exc, data):
                diags.append(make_diagnostic(path, text, positions, keys, message, fix, at_value=at_value))
            partial, pruned = _salvage(data, exc)
    return ParsedSpec(path=path, text=text, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
                      data=data, positions=positions, spec=spec, partial=partial, diagnostics=diags,
                      pruned=pruned)


_COLLECTIONS = ("datasets", "protocols", "phases", "variants")
_PLACEHOLDERS: dict[str, Any] = {"name": "spec", "base_model": "unknown", "datasets": {}, "phases": {}, "seeds": [0]}


def _salvage(data: dict[str, Any], exc: ValidationError) -> tuple[Optional[Spec], frozenset[str]]:
    """The spec without its broken fields (else its broken entries), for reference checks.

    Dropping only the bad field keeps the rest of the entry checked: a phase with a
    misspelled key still has its `from:` and datasets verified in the same report.
    """
    fields = _prune(copy.deepcopy(data), exc.errors(), whole_entries=False)
    try:
        return Spec.model_validate(fields[0]), fields[1]
    except ValidationError:
        pass
    entries = _prune(copy.deepcopy(data), exc.errors(), whole_entries=True)
    try:
        return Spec.model_validate(entries[0]), frozenset()
    except ValidationError:
        return None, frozenset()


def _prune(data: dict[str, Any], errors: list[Any], *, whole_entries: bool) -> tuple[dict[str, Any], frozenset[str]]:
    bad_waivers: set[int] = set()
    pruned: set[str] = set()
    for err in errors:
        section, rest = err["loc"][0], err["loc"][1:]
        if section in _COLLECTIONS and rest and isinstance(data.get(section), dict):
            entry = data[section].get(rest[0])
            if not whole_entries and len(rest) > 1 and isinstance(entry, dict) and rest[1] in entry:
                entry.pop(rest[1])
                pruned.add(f"{section}.{rest[0]}")
            else:
                data[section].pop(rest[0], None)
        elif section == "allow" and rest and isinstance(rest[0], int):
            bad_waivers.add(rest[0])
        elif section in _PLACEHOLDERS:
            data[section] = _PLACEHOLDERS[section]
        else:
            data.pop(section, None)
    if isinstance(data.get("allow"), list):
        data["allow"] = [w for i, w in enumerate(data["allow"]) if i not in bad_waivers]
    return data, frozenset(pruned)


def load_spec(path: Path) -> LoadedSpec:
    """Load and schema-check a spec; raises SpecError listing every problem.

    Cross-references (dataset/protocol/phase names, cycles, kinds) are checked by
    `engine.isolation.validate.validate_spec`, which also reports them together with these.
    """
    parsed = parse_spec(path)
    if parsed.diagnostics or parsed.spec is None:
        raise SpecError(sorted(parsed.diagnostics, key=lambda d: (d.line, d.col)))
    return parsed.loaded()


@functools.lru_cache(maxsize=64)
def _parsed_file(path: Path, text: str) -> tuple[Any, Positions, tuple[Diagnostic, ...]]:
    """A catalog file's plain data, positions and YAML problems, parsed once per process and
    content: the registry and hardware files are read by many stages, and parsing is their cost."""
    tree, positions, diags = parse_yaml(path, text)
    return plain(tree), positions, tuple(diags)


def load_model_file(path: Path, model: type[M]) -> tuple[M, ParsedYaml]:
    """Load any YAML file (e.g. a registry catalog) into a pydantic model, with located errors."""
    path = Path(path)
    text = read_text(path)
    data, positions, found = _parsed_file(path, text)
    diags = list(found)
    parsed = ParsedYaml(path=path, text=text, positions=positions)
    data = copy.deepcopy(data)  # the model may keep parts of it: each caller gets its own
    if not diags:
        try:
            return model.model_validate(data), parsed
        except ValidationError as exc:
            for keys, message, fix, at_value in describe_pydantic_errors(exc, data, model):
                diags.append(make_diagnostic(path, text, positions, keys, message, fix, at_value=at_value))
    raise SpecError(diags)


@dataclass(kw_only=True)
class ParsedYaml:
    """A YAML file's text and key positions, to point diagnostics into it."""

    path: Path
    text: str
    positions: Positions

    def diagnostic(self, keys: tuple[Key, ...], message: str, fix: str = "", **kw: Any) -> Diagnostic:
        return make_diagnostic(self.path, self.text, self.positions, keys, message, fix, **kw)
