# gazette-py: every target sets up .venv itself (pip only); nothing relies on a hand install.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= dev,s3,spark,notebook

.PHONY: venv services test-min peers delta-jars kafka-jars kafka-streams demo test test-fast lint typecheck protos bench bench-quick soak lab clean

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
# its zstd codec; without one it builds with -tags nozstd. Without Go the interop tests skip, saying so
# (under CI they fail instead, as does every test missing what a target here installs: tests/needs.py).
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

# Delta Lake's jars (fragments_io/delta-jars.pom.xml) for the delta-spark tests and notebook 05 (make test, make lab), copied
# from Maven Central (through the local Maven repository, ~/.m2, shared by every clone) into build/delta/jars
# once and reused while that pom is unchanged: sessions start
# with them, no download at query time. Needs Maven (Debian's maven package is installed when missing,
# as root, with apt-get); without it the delta-spark tests skip, saying so.
DELTA_POM := fragments_io/delta-jars.pom.xml
DELTA_STAMP := build/delta/.fetched
delta-jars: $(DELTA_STAMP)

$(DELTA_STAMP): $(DELTA_POM)
	@if ! command -v mvn >/dev/null 2>&1 && ! { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q maven || \
	      { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q maven; }; }; }; then \
	  echo "delta-jars: Maven is not installed (Debian: apt-get install maven), so the delta-spark tests will skip"; \
	else \
	  echo "delta-jars: copying Delta Lake's jars into build/delta/jars"; \
	  rm -rf build/delta/jars; \
	  for attempt in 1 2; do \
	    mvn -q -B -Dstyle.color=never -f $(DELTA_POM) dependency:copy-dependencies -DincludeScope=runtime \
	      -DoutputDirectory=$(CURDIR)/build/delta/jars && touch $@ && break; \
	    [ $$attempt = 2 ] && exit 1; echo "delta-jars: Maven failed, trying once more"; sleep 5; \
	  done; \
	fi

# The bench's Kafka peer (bench/kafka_peer.py): a KRaft broker's jars (bench/kafka-jars/broker.pom.xml) and
# Spark's Kafka source (spark.pom.xml), copied from Maven Central into build/kafka once and reused while those
# poms are unchanged. Needs Java and Maven (Debian's default-jre-headless and maven are installed when
# missing, as root, with apt-get); without them the bench's Kafka rows and tests/test_bench_kafka_peer.py
# skip, saying so.
KAFKA_POMS := bench/kafka-jars/broker.pom.xml bench/kafka-jars/spark.pom.xml
KAFKA_STAMP := build/kafka/.fetched
kafka-jars: $(KAFKA_STAMP)

$(KAFKA_STAMP): $(KAFKA_POMS)
	@if ! { command -v mvn >/dev/null && command -v java >/dev/null; } && ! { command -v apt-get >/dev/null && \
	    [ "$$(id -u)" = 0 ] && { DEBIAN_FRONTEND=noninteractive apt-get install -y -q default-jre-headless maven || \
	      { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q default-jre-headless maven; }; }; }; then \
	  echo "kafka-jars: Java and Maven are not installed (Debian: apt-get install default-jre-headless maven), so the bench's Kafka rows will skip"; \
	else \
	  echo "kafka-jars: copying Kafka's and Spark's Kafka source's jars into build/kafka"; \
	  for part in broker spark; do \
	    rm -rf build/kafka/$$part; \
	    for attempt in 1 2; do \
	      mvn -q -B -f bench/kafka-jars/$$part.pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	        -DoutputDirectory=$(CURDIR)/build/kafka/$$part && break; \
	      [ $$attempt = 2 ] && exit 1; echo "kafka-jars: Maven failed, trying once more"; sleep 5; \
	    done; \
	  done; \
	  touch $@; \
	fi

# The bench's Kafka Streams peer (bench/kstreams_peer.py): its exactly-once word count, a small Java
# program (bench/kafka_streams), compiled by Maven against Kafka Streams from Maven Central into
# build/kafka/streams (its jar and its runtime dependencies) and reused while its pom and source are
# unchanged. Needs a JDK and Maven (Debian's default-jdk-headless and maven are installed when missing,
# as root, with apt-get); without them the bench's Kafka Streams row says so, and
# tests/test_bench_kstreams_peer.py skips (fails under CI).
KSTREAMS_DIR := bench/kafka_streams
KSTREAMS_STAMP := build/kafka/.streams-built
kafka-streams: $(KSTREAMS_STAMP)

$(KSTREAMS_STAMP): $(KSTREAMS_DIR)/pom.xml $(wildcard $(KSTREAMS_DIR)/src/main/java/dev/gazettepy/bench/*.java)
	@if ! { command -v mvn >/dev/null && command -v javac >/dev/null; } && ! { command -v apt-get >/dev/null && \
	    [ "$$(id -u)" = 0 ] && { DEBIAN_FRONTEND=noninteractive apt-get install -y -q default-jdk-headless maven || \
	      { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q default-jdk-headless maven; }; }; }; then \
	  echo "kafka-streams: a JDK and Maven are not installed (Debian: apt-get install default-jdk-headless maven), so the bench's Kafka Streams row will skip"; \
	else \
	  echo "kafka-streams: compiling the Kafka Streams word count into build/kafka/streams"; \
	  rm -rf build/kafka/streams build/kafka/streams-build; \
	  for attempt in 1 2; do \
	    mvn -q -B -Dstyle.color=never -Dmaven.test.skip=true -f $(KSTREAMS_DIR)/pom.xml package && touch $@ && break; \
	    [ $$attempt = 2 ] && exit 1; echo "kafka-streams: Maven failed, trying once more"; sleep 5; \
	  done; \
	fi

demo: $(STAMP)
	$(BIN)/gazette demo

lint: $(STAMP)
	$(BIN)/ruff check gazette fragments_io tests bench
	$(BIN)/ruff format --check gazette fragments_io tests bench

typecheck: $(STAMP)
	$(BIN)/mypy gazette

# The Debian services the suite starts (PostgreSQL, Chromium, iproute2): installed when missing if run as
# root, else it says what it skipped and those tests skip, or fail under CI (.ci/services; tests/needs.py).
services:
	@bash .ci/services

# Lint and types first (cheap), then the whole suite; the demo runs inside it (tests/test_demo.py).
test: $(STAMP) services peers delta-jars kafka-jars kafka-streams lint typecheck
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

bench: $(STAMP) peers kafka-jars kafka-streams
	@$(NATS_SERVER_CHECK)
	$(BIN)/python -m bench

bench-quick: $(STAMP) peers kafka-jars kafka-streams
	@$(NATS_SERVER_CHECK)
	$(BIN)/python -m bench --quick

# Jupyter refuses to run as root (containers, CI) without --allow-root; LAB_ARGS adds more, e.g. --port=8890.
lab: $(STAMP) delta-jars
	$(BIN)/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

clean:
	rm -rf $(VENV) $(MIN_VENV) build .pytest_cache .mypy_cache .ruff_cache
