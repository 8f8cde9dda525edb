"""The content key of a model: what every record names the model it was generated with.

A model folder's key is a hash of its whole content: the sha256 of each file, listed in a
manifest (`rlvr-manifest.json`) written once, when the folder is written (`write_manifest`:
the trl hand-off, and the verl launch script after its merge), and read back on every use
while the folder's files still have the names, sizes and modification times (ns) it lists: a
fine-tune of one architecture has weights of exactly the same size, so a checkpoint copied over
the folder would pass a name-and-size check; its new modification time does not. A folder without one (a
user's own) is hashed whole on each use, never written into. A hub id is keyed by the
revision the loaders will fetch (online the hub's, offline the local cache's). A model an
OpenAI-compatible server serves is keyed by what it serves, not where (`engine.evaluate.served_identity`): its served
name and the fingerprint of its answers (`backends.openai`), never the server's address.

    python -m engine.evaluate.model_key FOLDER   # write FOLDER's manifest, print its key
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Optional

from engine.errors import UserError

MANIFEST = "rlvr-manifest.json"
CHUNK = 1 << 20


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _key(entries: dict[str, dict]) -> str:
    lines = "".join(f"{name}\0{e['size']}\0{e['sha256']}\n" for name, e in sorted(entries.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def _entries(root: Path) -> dict[str, dict]:
    out = {}
    for p in _files(root):
        stat = p.stat()  # before the hash: a write during it leaves a later mtime, a stale manifest
        out[p.relative_to(root).as_posix()] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": _sha256(p)}
    return out


def write_manifest(root: Path) -> str:
    """Hash every file of `root` and write the manifest beside them (atomically); returns the key."""
    root = Path(root)
    entries = _entries(root)
    key = _key(entries)
    partial = root / f".{MANIFEST}.partial"
    partial.write_text(json.dumps({"key": key, "files": entries}, indent=1, sort_keys=True) + "\n")
    os.replace(partial, root / MANIFEST)
    return key


def _manifest_key(root: Path) -> Optional[str]:
    """The manifest's key while the folder still holds exactly the files it lists, at their sizes and
    modification times (a manifest without times, or a file touched since, is hashed again)."""
    try:
        data = json.loads((root / MANIFEST).read_text())
        entries = data["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    present = {p.relative_to(root).as_posix(): (s.st_size, s.st_mtime_ns) for p in _files(root) if (s := p.stat())}
    listed = {name: (e.get("size"), e.get("mtime_ns")) for name, e in entries.items()}
    if present != listed or data.get("key") != _key(entries):
        return None
    return data["key"]


WEIGHTS = (".safetensors", ".bin", ".pt")


def weights_digest(root: Path) -> dict[str, str]:
    """The sha256 of each weights file of a model folder (its manifest's, while the folder still
    matches it): two folders with the same digests hold bit-identical weights, whatever their
    config or tokenizer files say. Empty for a folder with no weights."""
    root = Path(root)
    entries = _manifest_entries(root) or _entries(root)
    return {name: e["sha256"] for name, e in entries.items() if name.endswith(WEIGHTS)}


def _manifest_entries(root: Path) -> Optional[dict[str, dict]]:
    if _manifest_key(root) is None:
        return None
    return json.loads((root / MANIFEST).read_text())["files"]


def model_key(model: str) -> str:
    """The key records are written under for `model` (a folder, a hub id, or a served name)."""
    root = Path(model)
    if root.is_dir():
        return _manifest_key(root) or _key(_entries(root))
    if "/" in model and not model.startswith((".", "/")):
        return f"{model}@{hub_revision(model)}"
    return model


def hub_revision(repo: str) -> str:
    """The commit a hub id resolves to now, as the loaders resolve it: online, the hub's (they
    download a newer revision over a stale cache), else the local cache's."""
    try:
        from huggingface_hub import HfApi, constants, snapshot_download
    except ImportError:  # pragma: no cover - a dependency of transformers
        raise UserError(f"cannot resolve hub model {repo}: huggingface_hub is not installed") from None
    if not constants.HF_HUB_OFFLINE:
        try:
            sha = HfApi().model_info(repo).sha
            if sha:
                return sha
        except Exception:  # the hub is not reachable: the loaders fall back to the cache too
            pass
    try:
        return Path(snapshot_download(repo, local_files_only=True)).name
    except Exception:  # not in the local cache either
        pass
    try:
        sha = HfApi().model_info(repo).sha
    except Exception as exc:
        raise UserError(f"cannot resolve hub model {repo} to a revision ({type(exc).__name__}): records are keyed "
                        "by the model's content\n  fix: download it first (huggingface-cli download "
                        f"{repo}), or point the run at a local model folder") from None
    if not sha:
        raise UserError(f"the hub gives no revision for {repo}\n  fix: point the run at a local model folder")
    return sha


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python -m engine.evaluate.model_key FOLDER", file=sys.stderr)
        return 2
    print(write_manifest(Path(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
