# One-command set-up: every target creates .venv and installs the pinned project when missing.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint install browser bench-set clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/as2d compare tests/data/long_en.flac --language en

test: $(STAMP) browser
	$(BIN)/python -m pytest -q

# The page's tests (tests/test_page.py) drive a headless Chromium: Debian's, installed with apt
# where it is missing (as root, else through sudo). Without one those tests fail, saying so.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
	  || command -v google-chrome >/dev/null || ! command -v apt-get >/dev/null \
	  || { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
	  || echo "make: chromium could not be installed: tests/test_page.py will fail, saying so"

bench-set: $(STAMP)
	$(BIN)/python scripts/make_bench_set.py

lint: $(STAMP)
	$(BIN)/ruff format --check src tests scripts
	$(BIN)/ruff check src tests scripts
	$(BIN)/mypy src

clean:
	rm -rf $(VENV) build src/*.egg-info
