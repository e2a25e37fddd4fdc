# Every target does its own set-up: a fresh clone needs nothing but python3 (>= 3.11).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck docs pytest django services browser topologies bench soak clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[all,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/relaymq demo

test: $(STAMP) services browser topologies lint typecheck docs pytest django

lint: $(STAMP)
	$(BIN)/ruff check relaymq tests tests_django benchmarks
	$(BIN)/ruff format --check relaymq tests tests_django benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

services:
	bash scripts/services.sh

browser:  # Debian's Chromium, for the dashboard's browser tests (Playwright)
	bash scripts/chromium.sh

topologies:  # PgBouncer, replicas, sentinels, a RabbitMQ cluster (tests/topologies)
	bash scripts/topologies.sh

docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet

pytest: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

django:  # Django 6 needs Python >= 3.12: its own virtualenv (.venv-django)
	bash scripts/django-tests.sh

bench: $(STAMP)
	$(BIN)/python benchmarks/throughput.py --url $${URL:-sqlite:///$$(mktemp -d)/bench.db}

soak: $(STAMP) services  # the long chaos soak on every backend, then the long partition profile (hours; SOAK_ARGS="--jobs 20000 redis")
	$(BIN)/python -m tests.soak.run $(SOAK_ARGS)
	$(BIN)/python -m tests.soak.run --partitions $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .venv-django .mypy_cache .ruff_cache .pytest_cache .site .screenshots
