"""A FAKE `accelerate launch` (several GPUs are needed for the real one): records how it was called
(its arguments, the devices and CPUs it was given, its process) as one JSON line in
$FAKE_ACCELERATE_LOG, and starts nothing. Used as RLVR_ACCELERATE="python tests/fakes/accelerate_launch.py"."""

from __future__ import annotations

import json
import os
import sys

with open(os.environ["FAKE_ACCELERATE_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps({"argv": sys.argv[1:], "devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                          "cpus": os.environ.get("RLVR_CPUS"), "pid": os.getpid()}) + "\n")
