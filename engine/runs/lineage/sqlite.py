"""sqlite-utils, imported without its optional pandas and numpy support.

sqlite-utils imports pandas and numpy whenever they are installed, to map their scalar
types to column types. Lineage stores plain Python values only, and those two imports
cost more than a second: every `rlvr-run status` would pay it. So they are hidden
while sqlite-utils loads (a process that imports them later still gets them).
"""

from __future__ import annotations

import sys

_HIDDEN = ("pandas", "numpy")


def _import_without_pandas():
    if "sqlite_utils.db" in sys.modules:
        return
    hidden = {name: sys.modules.get(name) for name in _HIDDEN if name not in sys.modules}
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # makes `import name` raise ImportError
    try:
        import sqlite_utils.db  # noqa: F401
    finally:
        for name in hidden:
            del sys.modules[name]


_import_without_pandas()

from sqlite_utils import Database  # noqa: E402
from sqlite_utils.migrations import Migrations  # noqa: E402

__all__ = ["Database", "Migrations"]
