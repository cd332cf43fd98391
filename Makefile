# Quick start: `make train` and `make test`. Both create .venv on first use. `make help` lists
# every target. Settings: PYTHON=python3.12 (the interpreter that builds .venv, first use only),
# ARGS="..." (extra arguments: Hydra overrides for demo/train, pytest arguments for test).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TEST_WORKERS ?= auto

.PHONY: help install demo train test test-all lint docs lock clean clean-logs clean-data wheels

help:
	@echo "make install     .venv with the pinned versions (requirements.lock); every target does it first"
	@echo "make demo        the two-minute first run (ARGS: Hydra overrides)"
	@echo "make train       the full built-in run, ~10 min on 2 cores (ARGS: Hydra overrides)"
	@echo "make test        the default test suite, as CI runs it (ARGS: pytest arguments)"
	@echo "make test-all    the suite with the slow tests"
	@echo "make lint        ruff"
	@echo "make docs        the docs' generated tables and verdict, from the committed data"
	@echo "make lock        rewrite requirements.lock from the installed dependencies"
	@echo "make wheels      wheels for maint/gpu_check.sh (TARGET_PY, TARGET_TORCH)"
	@echo "make clean       caches and build leftovers (__pycache__, .pytest_cache, .ruff_cache, build/)"
	@echo "make clean-logs  every run under outputs/: checkpoints, logs, results (cannot be undone)"
	@echo "make clean-data  the feature stores in data/cache/ (re-extracted on the next run)"
	@echo "settings: PYTHON=python3.x (builds .venv), ARGS=\"...\", TEST_WORKERS=auto|N|0 (pytest workers)"

install: $(STAMP)

# Re-install only when the pins or the project metadata change (idempotent).
$(STAMP): requirements.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c requirements.lock -e ".[dev]"
	touch $(STAMP)

# The two-minute first run: the same pipeline on a small slice of the built-in data.
demo: install
	$(PY) train.py experiment=demo $(ARGS)

train: install
	$(PY) train.py $(ARGS)

# One pytest worker per core, each on one torch thread (tests/conftest.py): 9 min instead of 21
# on a 2-core AVX2 CPU (docs/development.md). TEST_WORKERS=0: one process (for --pdb, or to read one test's output).
test: install
	$(PY) -m pytest -m "not slow" -n $(TEST_WORKERS) $(ARGS)

test-all: install
	$(PY) -m pytest -n $(TEST_WORKERS) $(ARGS)

# The docs' tables and the verdict's sentences, regenerated from committed data (a test checks
# that this changes nothing).
docs: install
	$(PY) maint/make_docs.py

lint: install
	$(PY) -m ruff check .

# Wheels for maint/gpu_check.sh on a GPU machine without internet (its Python and torch).
TARGET_PY    ?= 3.12
TARGET_TORCH ?= 2.11
wheels: install
	$(PY) maint/make_wheels.py --python $(TARGET_PY) --torch $(TARGET_TORCH)

lock: install
	$(PY) maint/lock_requirements.py

clean:
	rm -rf .pytest_cache .ruff_cache build *.egg-info
	find . -name __pycache__ -type d -not -path "./.venv/*" -prune -exec rm -rf {} +

clean-logs:
	rm -rf outputs

clean-data:
	rm -rf data/cache
