# `make run`  : write the comparison report into reports/attnbayes/ (the main job)
# `make test` : lint and run the test suite
# `make notebooks` : execute the notebooks and README's Python blocks (CI runs it after `make test`)
# `make test-distributed` : two processes on 127.0.0.1 (jax.distributed); CI runs it too
# Both create .venv with a Python >= 3.12 found on this machine and install the project into it.

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Candidates, best first: versioned names on PATH, then pyenv's versions (newest first).
# `make PYTHON=/path/to/python3.x ...` uses that interpreter only.
PYENV_ROOT ?= $(shell pyenv root 2>/dev/null || echo $(HOME)/.pyenv)
CANDIDATES := $(if $(PYTHON),$(PYTHON),python3.13 python3.12 python3 python \
	$(shell ls -d $(PYENV_ROOT)/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV))
# A candidate qualifies if it is >= 3.12 and can create a venv with pip (venv + ensurepip).
FIND_PYTHON := for c in $(CANDIDATES); do \
	  p=$$(command -v $$c 2>/dev/null) || continue; \
	  $$p -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 12))' 2>/dev/null \
	    && { echo $$p; break; }; \
	done

.PHONY: run test notebooks test-report test-slow test-distributed lint bench clean

$(STAMP): pyproject.toml
	@if [ ! -x $(PY) ]; then \
	  base=$$($(FIND_PYTHON)); \
	  if [ -z "$$base" ]; then \
	    echo "error: attnbayes needs Python >= 3.12 with venv and ensurepip; none found" >&2; \
	    echo "       (tried: $(CANDIDATES))." >&2; \
	    echo "       Install Python 3.12 or newer, or pass one with: make PYTHON=/path/to/python3.12 ..." >&2; \
	    exit 1; \
	  fi; \
	  echo "creating $(VENV) with $$base ($$($$base --version))"; \
	  $$base -m venv $(VENV) || { rm -rf $(VENV); exit 1; }; \
	fi
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/attnbayes report --out reports

# Two pytest workers (one per core; tests/conftest.py keeps each file on one worker).
# README's blocks run in `make notebooks` (README_BLOCKS): here only their cheap checks.
README_BLOCKS := tests/test_docs.py::test_readme_block_runs
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -P -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder tests --deselect $(README_BLOCKS)

# Executes the eight notebooks with small sizes (ATTNBAYES_NB_N; they are not rewritten) and
# each of README's Python blocks in a fresh interpreter. CI runs it after `make test`.
notebooks: $(STAMP)
	ATTNBAYES_NB_N=200 $(PY) -P -m pytest -q -n 2 --nbmake notebooks
	$(PY) -P -m pytest -q -n 2 $(README_BLOCKS)

# The quick report end to end (tests/app/report/test_report.py, marker `report`): about 3
# minutes on one core, so not in `make test`; CI runs it after `make test`.
test-report: $(STAMP)
	$(PY) -P -m pytest -q -m report tests/app/report/test_report.py

test-slow: $(STAMP)
	$(PY) -P -m pytest -q -m slow

# Two processes joined by jax.distributed on 127.0.0.1 (docs/distributed.md): the sharded
# E-step and NPMLE and `attnbayes calibrate` against one process (about 40 s; each pair of
# processes is killed after 3 minutes); then both trainers on one and two devices (2-3 min).
TRAINERS_ON_DEVICES := tests/inference/deconvolution/learned/test_training.py::test_both_trainers_give_the_same_parameters_on_one_and_two_devices
test-distributed: $(STAMP)
	$(PY) -P -m pytest -q -p no:xdist -m slow tests/app/test_distributed.py $(TRAINERS_ON_DEVICES)

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[dev,bench]"
	$(PY) benchmarks/em_step.py
	$(PY) benchmarks/bandwidth_selection.py
	$(PY) benchmarks/streaming_attention.py
	$(PY) benchmarks/streaming_em.py
	$(PY) benchmarks/npmle.py
	$(PY) benchmarks/koenker_mizera.py
	$(PY) benchmarks/nuts_vs_pymc.py
	$(PY) benchmarks/switching_filters.py
	$(PY) benchmarks/switching_rmse.py
	$(PY) benchmarks/switching_gibbs.py
	$(PY) benchmarks/switching_learning.py

clean:
	rm -rf $(VENV) reports
