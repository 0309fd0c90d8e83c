# One-command set-up: every target creates .venv and installs the pinned project when missing.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint install bench-set clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/as2d compare tests/data/long_en.flac --language en

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench-set: $(STAMP)
	$(BIN)/python scripts/make_bench_set.py

lint: $(STAMP)
	$(BIN)/ruff format --check src tests scripts
	$(BIN)/ruff check src tests scripts
	$(BIN)/mypy src

clean:
	rm -rf $(VENV) build src/*.egg-info
