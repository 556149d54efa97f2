# gazette-py: every target sets up .venv itself (pip only); nothing relies on a hand install.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= dev,s3,spark,notebook

.PHONY: venv demo test test-fast lint typecheck protos bench bench-quick soak lab clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gazette demo

lint: $(STAMP)
	$(BIN)/ruff check gazette fragments_io tests bench

typecheck: $(STAMP)
	$(BIN)/mypy gazette

# Lint and types first (cheap), then the whole suite; the demo runs inside it (tests/test_demo.py).
test: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -m "not soak" $(PYTEST_ARGS)

soak: $(STAMP)
	GAZETTE_HYPOTHESIS_PROFILE=soak $(BIN)/python -m pytest -m "soak" $(PYTEST_ARGS)

protos: $(STAMP)
	$(BIN)/python -m gazette.protocol.generate

bench: $(STAMP)
	$(BIN)/python -m bench

bench-quick: $(STAMP)
	$(BIN)/python -m bench --quick

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
