"""What travels between the runner and a Ray job without shared storage: the run directory
uploaded as the job's working_dir (`zip_run_dir`), and the directory the job prints back as a
base64 tarball between two marker lines at the end of its log (`WORKING_DIR_ENTRYPOINT`),
unpacked over the local one when the job ends (`unpack_outputs`)."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import zipfile
from pathlib import Path
from typing import Optional

OUTPUTS_BEGIN, OUTPUTS_END = "# rlvr-run: outputs-begin", "# rlvr-run: outputs-end"
# The markers are printed from two words each, so Ray's echo of the entrypoint never contains them.
# The tarball is made first (its messages kept apart) and printed as one line with its sha256,
# so nothing can land inside it and a damaged copy is told apart from a good one.
WORKING_DIR_ENTRYPOINT = (
    "printf '%s %s:%s\\n' '# rlvr-run: working_dir' \"$(hostname)\" \"$PWD\"; "
    'RLVR_RUN_DIR="$PWD" bash launch.sh; rc=$?; t=$(mktemp); '
    "tar -czf \"$t\" --exclude='./logs/attempt-*.log' --exclude=./.rlvr-attempt . 2>\"$t.err\"; "
    "printf '\\n%s %s %s\\n' '# rlvr-run:' outputs-begin \"$(sha256sum < \"$t\" | cut -c1-64)\"; "
    "base64 -w 0 \"$t\"; printf '\\n%s %s\\n' '# rlvr-run:' outputs-end; "
    "cat \"$t.err\"; rm -f \"$t\" \"$t.err\"; exit $rc"
)


def shown_part(text: str) -> str:
    """What of an ended job's log goes into the attempt log: all of it but the outputs tarball."""
    cut = text.rfind(OUTPUTS_BEGIN)
    return text[:cut].rstrip("\n") + "\n" if cut >= 0 else text


def unpack_outputs(log_text: str, run_dir: Path) -> Optional[str]:
    """Unpack the run directory a job printed at the end of its log over the local one; what went
    wrong, or None."""
    begin, end = log_text.rfind(OUTPUTS_BEGIN), log_text.rfind(OUTPUTS_END)
    if begin < 0 or end < begin:
        return "its log ends without the outputs tarball"
    digest, _, encoded = log_text[begin + len(OUTPUTS_BEGIN):end].strip().partition("\n")
    try:
        data = base64.b64decode(encoded)
        if hashlib.sha256(data).hexdigest() != digest.strip():
            return f"the outputs tarball in its log is damaged ({len(data)} bytes, sha256 differs)"
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(run_dir, filter="data")
    except (ValueError, EOFError, tarfile.TarError, OSError) as exc:
        return f"the outputs tarball in its log is unreadable ({exc})"
    return None


def zip_run_dir(run_dir: Path, submission_id: str) -> bytes:
    """The run directory without its attempt logs (the runner writes those), plus a file naming the
    attempt: Ray unpacks each package URI once per node and jobs write into it, so no two attempts
    may share one."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(run_dir.rglob("*")):
            relative = path.relative_to(run_dir)
            if path.is_file() and not (relative.parts[0] == "logs" and path.name.startswith("attempt-")):
                archive.write(path, relative)
        archive.writestr(".rlvr-attempt", submission_id + "\n")
    return buffer.getvalue()
