# gazette-py: every target sets up .venv itself (pip only); nothing relies on a hand install.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= dev,s3,spark,notebook

.PHONY: venv services test-min peers demo test test-fast lint typecheck protos bench bench-quick soak lab clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@# The package index can drop a download half-way (seen in CI): each pip step is tried three times,
	@# and pip resumes a partial wheel itself on the newer pip.
	@for attempt in 1 2 3; do $(BIN)/python -m pip install -q --upgrade pip && break; \
	  [ $$attempt = 3 ] && exit 1; echo "venv: pip upgrade failed, trying again"; sleep 10; done
	@for attempt in 1 2 3; do $(BIN)/python -m pip install -q --resume-retries 10 -e ".[$(EXTRAS)]" && break; \
	  [ $$attempt = 3 ] && exit 1; echo "venv: pip install failed (attempt $$attempt), trying again"; sleep 10; done
	@touch $(STAMP)

# Real Gazette (gazette, gazctl) at the version pinned in tests/interop/gopeers/go.mod, built from the Go
# module proxy into build/peers/bin and reused while that go.mod is unchanged. cgo (a C compiler) builds
# its zstd codec; without one it builds with -tags nozstd. Without Go the interop tests skip, saying so.
PEERS_BIN := build/peers/bin
GOPEERS := tests/interop/gopeers
PEERS_STAMP := $(PEERS_BIN)/.built
# Gazette's stream-sum example for tests/interop/test_stream_sum.py: its summer consumer, and a chunker
# command of ours around its generator and verifier, built from tests/interop/streamsum/go.mod (same
# Gazette version), and interop-messages, Go publishers and read-committed readers on Gazette's message
# package for tests/interop/test_go_consumers.py. Its stores link RocksDB (cgo): Debian's librocksdb-dev
# is installed when missing (as root, with apt-get); without it, a C compiler or Go, those tests skip,
# saying so.
STREAMSUM := tests/interop/streamsum
STREAMSUM_STAMP := $(PEERS_BIN)/.stream-sum-built
peers: $(PEERS_STAMP) $(STREAMSUM_STAMP)

$(PEERS_STAMP): $(GOPEERS)/go.mod $(GOPEERS)/go.sum $(GOPEERS)/tools.go
	@if ! command -v go >/dev/null 2>&1; then \
	  echo "peers: Go is not installed, so the interop tests will skip (install Go >= 1.25, e.g. apt-get install golang-go, then: make peers)"; \
	else \
	  mkdir -p $(PEERS_BIN); \
	  if command -v cc >/dev/null 2>&1; then cgo=1; tags=; else cgo=0; tags="-tags nozstd"; fi; \
	  echo "peers: building gazette and gazctl ($$(sed -n 's/^require go.gazette.dev\/core //p' $(GOPEERS)/go.mod), CGO_ENABLED=$$cgo)"; \
	  for attempt in 1 2; do \
	    (cd $(GOPEERS) && CGO_ENABLED=$$cgo GOFLAGS=-mod=mod go build $$tags -o $(CURDIR)/$(PEERS_BIN)/ \
	      go.gazette.dev/core/cmd/gazette go.gazette.dev/core/cmd/gazctl) && \
	      sed -n 's/^require go.gazette.dev\/core //p' $(GOPEERS)/go.mod > $(PEERS_BIN)/VERSION && touch $@ && break; \
	    [ $$attempt = 2 ] && exit 1; echo "peers: build failed, trying once more"; sleep 5; \
	  done; \
	fi

$(STREAMSUM_STAMP): $(STREAMSUM)/go.mod $(STREAMSUM)/go.sum $(STREAMSUM)/tools.go $(STREAMSUM)/chunker/main.go \
    $(STREAMSUM)/messages/main.go
	@rocksdb() { printf '#include <rocksdb/c.h>\n' | cc -E -x c - >/dev/null 2>&1; }; \
	if ! command -v go >/dev/null 2>&1 || ! command -v cc >/dev/null 2>&1; then \
	  echo "peers: Gazette's stream-sum example needs Go and a C compiler (cgo), so its interop test will skip"; \
	elif ! rocksdb && ! { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q librocksdb-dev || \
	      { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q librocksdb-dev; }; } && rocksdb; }; then \
	  echo "peers: Gazette's stream-sum example needs RocksDB (Debian: apt-get install librocksdb-dev), so its interop test will skip"; \
	else \
	  mkdir -p $(PEERS_BIN); \
	  echo "peers: building Gazette's stream-sum example ($$(sed -n 's/^[[:space:]]*go.gazette.dev\/core //p' $(STREAMSUM)/go.mod))"; \
	  for attempt in 1 2; do \
	    (cd $(STREAMSUM) && export CGO_ENABLED=1 GOFLAGS=-mod=mod && \
	      go build -o $(CURDIR)/$(PEERS_BIN)/stream-sum-summer go.gazette.dev/core/examples/stream-sum/summer && \
	      go build -o $(CURDIR)/$(PEERS_BIN)/stream-sum-chunker ./chunker && \
	      go build -o $(CURDIR)/$(PEERS_BIN)/interop-messages ./messages) && touch $@ && break; \
	    [ $$attempt = 2 ] && exit 1; echo "peers: build failed, trying once more"; sleep 5; \
	  done; \
	fi

demo: $(STAMP)
	$(BIN)/gazette demo

lint: $(STAMP)
	$(BIN)/ruff check gazette fragments_io tests bench

typecheck: $(STAMP)
	$(BIN)/mypy gazette

# The Debian services the suite starts (PostgreSQL, Chromium): installed when missing if run as root,
# else it says what it skipped and those tests skip (.ci/services; CI runs it through make test).
services:
	@bash .ci/services

# Lint and types first (cheap), then the whole suite; the demo runs inside it (tests/test_demo.py).
test: $(STAMP) services peers lint typecheck
	$(BIN)/python -m pytest -m "not soak" $(PYTEST_ARGS)

# The runtime dependencies at the lower bounds of pyproject's ranges (.ci/min-requirements.py) in a venv
# of their own, .venv-min, with current test tools, running a fast subset (MIN_TESTS). Not in make test.
MIN_VENV := .venv-min
MIN_TESTS ?= tests/protocol/test_selector.py tests/conformance tests/message/test_framing.py \
	tests/cli/test_log_format.py tests/cli/test_cli_parity.py tests/consumer/test_metrics.py
test-min:
	@test -x $(MIN_VENV)/bin/python || $(PY) -m venv $(MIN_VENV)
	@$(PY) .ci/min-requirements.py > $(MIN_VENV)/lower-bounds.txt
	@echo "test-min: installing the lower bounds: $$(tr '\n' ' ' < $(MIN_VENV)/lower-bounds.txt)"
	@for attempt in 1 2 3; do $(MIN_VENV)/bin/python -m pip install -q --upgrade pip && \
	  $(MIN_VENV)/bin/python -m pip install -q -r $(MIN_VENV)/lower-bounds.txt \
	    "pytest>=8" "pytest-asyncio>=0.23" "pytest-timeout>=2.3" "hypothesis>=6.100" && \
	  $(MIN_VENV)/bin/python -m pip install -q --no-deps -e . && break; \
	  [ $$attempt = 3 ] && exit 1; echo "test-min: pip failed (attempt $$attempt), trying again"; sleep 10; done
	$(MIN_VENV)/bin/python -m pip check
	$(MIN_VENV)/bin/python -m pytest -m "not soak" -p no:cacheprovider $(MIN_TESTS) $(PYTEST_ARGS)

soak: $(STAMP)
	GAZETTE_HYPOTHESIS_PROFILE=soak $(BIN)/python -m pytest -m "soak" $(PYTEST_ARGS)

protos: $(STAMP)
	$(BIN)/python -m gazette.protocol.generate

# The NATS JetStream peer needs Debian's nats-server: installed here when missing, if apt-get exists and
# we are root; otherwise the bench carries on and its peer rows say "nats-server not installed".
NATS_SERVER_CHECK = command -v nats-server >/dev/null || test -x /usr/sbin/nats-server || \
	{ command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q nats-server || \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nats-server; }; }; } || \
	echo "nats-server not installed (and not installable here): the bench's peer rows will say so"

bench: $(STAMP) peers
	@$(NATS_SERVER_CHECK)
	$(BIN)/python -m bench

bench-quick: $(STAMP) peers
	@$(NATS_SERVER_CHECK)
	$(BIN)/python -m bench --quick

# Jupyter refuses to run as root (containers, CI) without --allow-root; LAB_ARGS adds more, e.g. --port=8890.
lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

clean:
	rm -rf $(VENV) $(MIN_VENV) build .pytest_cache .mypy_cache .ruff_cache
