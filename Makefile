# Everything a fresh machine needs: Python 3.11+, pip, git, make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo up test test-default test-frameworks test-browser lint schemas bench results clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

## setuptools warns of every editable install in a banner (a folder named like the package could shadow it;
## none here does): silenced, so the first screen shows only what matters.
install: $(BIN)/python
	PYTHONWARNINGS="ignore:Editable installation" \
		$(BIN)/python -m pip install -q -e ./schemas -e './clients[mcp]' -e '.[test]'

## Start the embedded stack (nats-server + redis/FalkorDB + hub) with NATS auth from the example roster,
## run the demo and the coordination scenario, keep serving until Ctrl-C.
## Options: make demo FRESH=1 (start empty), DATA_DIR=..., NATS_PORT=..., REDIS_PORT=...
DEMO_FLAGS = $(if $(FRESH),--fresh) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) \
	$(if $(NATS_PORT),--nats-port $(NATS_PORT)) $(if $(REDIS_PORT),--redis-port $(REDIS_PORT))
demo: install
	$(BIN)/recall up --secure --roster examples/roster.yaml --demo $(DEMO_FLAGS)

up: install
	$(BIN)/recall up

## Install everything and run the test suites against real servers started by the tests: the default suite, then
## the agent-framework adapters in a venv of their own (the frameworks are heavy; the client stays light).
test: test-default test-frameworks

test-default: install
	$(BIN)/python -m pytest

FW_VENV ?= .venv-frameworks
FW_BIN := $(FW_VENV)/bin
$(FW_BIN)/python:
	$(PYTHON) -m venv $(FW_VENV)
	$(FW_BIN)/python -m pip install -q --upgrade pip

## LangGraph, Google ADK, AutoGen and the OpenAI Agents SDK, each against a real hub (tests/frameworks/).
test-frameworks: $(FW_BIN)/python
	PYTHONWARNINGS="ignore:Editable installation" \
		$(FW_BIN)/python -m pip install -q -e ./schemas -e './clients[mcp,frameworks]' -e '.[test]'
	$(FW_BIN)/python -m pytest -m frameworks tests/frameworks

## The console's headless-browser tests (they skip in `make test` where no browser is installed):
## installs Debian's chromium and chromedriver (as root, with apt), then runs them.
test-browser: install
	@command -v chromedriver >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null; } || \
		{ echo "install chromium and chromium-driver (Debian) first"; exit 1; }
	$(BIN)/python -m pytest tests/test_console_browser.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

schemas: install
	$(BIN)/recall export-schemas

bench: install
	$(BIN)/recall bench

## Regenerate the results tables of README.md and docs/*.md from benchmarks/results/*.json.
results: install
	$(BIN)/python -m recall_hub.bench.tables

clean:
	rm -rf $(VENV) $(FW_VENV) build dist *.egg-info */*.egg-info
