"""`python -m engine.cli ...` is `rlvr-run ...`."""

import sys

from engine.cli import main

sys.exit(main())
