"""Shell stand-ins for what a trainer leaves, so pipeline and executor tests exercise scheduling alone.

Named fakes: the real trainers have tests of their own (tests/func/test_training_runs.py).
"""

from __future__ import annotations

import json
import struct


def _tiny_safetensors() -> bytes:
    """One float32 tensor, the smallest file the completion check accepts as weights."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    return struct.pack("<Q", len(header)) + header + struct.pack("<f", 0.0)


def _printf(data: bytes) -> str:
    return "printf '" + "".join(f"\\x{b:02x}" for b in data) + "'"


FAKE_MODEL_SH = (
    "mkdir -p model && echo '{}' > model/config.json && "
    f"{_printf(_tiny_safetensors())} > model/model.safetensors"
)
