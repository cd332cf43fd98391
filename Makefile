# Quick start: `make train` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install demo train test test-all lint clean wheels

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

test: install
	$(PY) -m pytest -m "not slow" $(ARGS)

test-all: install
	$(PY) -m pytest $(ARGS)

lint: install
	$(PY) -m ruff check .

# Wheels for scripts/gpu_check.sh on a GPU machine without internet (its Python and torch).
TARGET_PY    ?= 3.12
TARGET_TORCH ?= 2.11
wheels: install
	$(PY) scripts/make_wheels.py --python $(TARGET_PY) --torch $(TARGET_TORCH)

clean:
	rm -rf outputs .pytest_cache
