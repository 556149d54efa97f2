"""What some tests need installed (services, Gazette peers, jars, root, network namespaces): how they
stop when it is missing, and the version each installed one reports for the pytest header.

Outside CI a test missing one skips, saying how to install it. Under CI (CI=true or CI=1) it fails,
naming the install step: CI runs `make test`, which installs them all, so a skip there would turn a
broken install step into a green run. Every such skip in the suite goes through `missing`.
"""

from __future__ import annotations

import glob
import importlib
import os
import re
import shutil
import subprocess
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

CI_ENV = "CI"
VERSION_TIMEOUT_S = 10.0
REPO = Path(__file__).resolve().parents[1]

# The step that installs each thing: what a failure under CI names.
POSTGRES_STEP = "make services (.ci/services: apt-get install postgresql)"
CHROMIUM_STEP = "make services (.ci/services: apt-get install chromium)"
NETNS_STEP = (
    "make services (.ci/services: apt-get install iproute2), run as root: `ip netns add` needs "
    "CAP_NET_ADMIN (CI runs .ci/run as root)"
)
ROOT_STEP = "run the suite as root (CI runs .ci/run as root)"
PEERS_STEP = "make peers (builds gazette and gazctl into build/peers/bin; needs Go >= 1.25)"
GO_STEP = "install Go >= 1.25 (e.g. apt-get install golang-go; `make peers` needs it too)"
STREAM_SUM_STEP = (
    "make peers (builds Gazette's stream-sum example and interop-messages; needs Go, a C compiler "
    "and librocksdb-dev, which it installs as root)"
)
DELTA_JARS_STEP = "make delta-jars (Maven copies them into build/delta/jars)"
KAFKA_JARS_STEP = "make kafka-jars (Maven copies them into build/kafka; as root it installs Java and Maven)"
KAFKA_STREAMS_STEP = (
    "make kafka-streams (Maven compiles bench/kafka_streams into build/kafka/streams; as root it installs a JDK "
    "and Maven)"
)
VENV_STEP = "make venv (pip install -e '.[dev,s3,spark,notebook]')"

CHROMIUM = Path("/usr/bin/chromium")  # Debian's, which Playwright drives (tests/notebook/test_browser.py)
PEERS = ("gazette", "gazctl", "stream-sum-summer", "stream-sum-chunker", "interop-messages")


def under_ci() -> bool:
    """True when the CI environment variable says so ("true", "1", "yes"; any case)."""
    return os.environ.get(CI_ENV, "").strip().lower() in ("true", "1", "yes")


def missing(what: str, step: str) -> NoReturn:
    """Stops the test because `what` (a sentence saying what is missing) is: a skip saying `step`,
    the install step that provides it, or under CI a failure naming that step."""
    if under_ci():
        pytest.fail(f"{what}: under CI a failure, not a skip; the install step is {step}", pytrace=False)
    pytest.skip(f"{what}; install: {step}")


def import_or_missing(module: str, step: str = VENV_STEP) -> ModuleType:
    """`module` imported, else `missing` naming the step that installs it (pytest.importorskip's role)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing(f"Python module {module} cannot be imported ({exc})", step)


def require_root(why: str) -> None:
    """`missing` unless this process is root; `why` says what needs it."""
    if os.geteuid() != 0:
        missing(f"not running as root, which {why} needs", ROOT_STEP)


# The pytest header: the version output of every service and peer the suite runs, each run once.


def _run(argv: list[str]) -> str:
    """The first non-empty line `argv` prints (stdout, else stderr), or why it printed none."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=VERSION_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`{' '.join(argv)}` failed: {exc}"
    for stream in (done.stdout, done.stderr):
        lines = [line.strip() for line in stream.splitlines() if line.strip()]
        if lines:
            return lines[0]
    return f"`{' '.join(argv)}` printed nothing (exit {done.returncode})"


def _etcd() -> str:
    from gazette.keyspace.etcd import find_etcd_binary

    try:
        binary = find_etcd_binary()
    except RuntimeError:
        return f"not found; install: {VENV_STEP}"
    return f"{_run([binary, '--version'])} ({binary})"


def _postgres() -> str:
    from fixtures_postgres import postgres_bin_dir

    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        return f"not installed; install: {POSTGRES_STEP}"
    binary = os.path.join(bin_dir, "postgres")
    return f"{_run([binary, '--version'])} ({binary})"


def _chromium() -> str:
    if not CHROMIUM.exists():
        return f"not installed; install: {CHROMIUM_STEP}"
    return f"{_run([str(CHROMIUM), '--version'])} ({CHROMIUM})"


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        return f"not installed; install: {KAFKA_JARS_STEP}"
    return f"{_run([java, '-version'])} ({java})"


def _peers() -> list[str]:
    """Each built peer's Gazette module version as its binary records it (`go version -m`): Gazette's
    binaries have no --version flag, and the go.mod pin says what was asked for, not what was built."""
    from gazette.local.gazette_peer import peers_bin

    built = [peers_bin() / name for name in PEERS if (peers_bin() / name).is_file()]
    if not built:
        return [f"gazette peers: not built in {peers_bin()}; install: {PEERS_STEP}"]
    go = shutil.which("go")
    if go is None:
        return [f"{p.name}: built ({p}), no `go` to read its build info" for p in built]
    try:
        done = subprocess.run(
            [go, "version", "-m", *map(str, built)], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"gazette peers: `go version -m` failed: {exc}"]
    lines, toolchain = [], {}
    core: dict[str, str] = {}
    current = ""
    for line in done.stdout.splitlines():
        if not line.startswith("\t"):  # "/path/gazette: go1.26.8"
            current, _, toolchain[current] = line.rpartition(": ")
        elif (fields := line.split()) and fields[0] in ("mod", "dep") and fields[1] == "go.gazette.dev/core":
            core[current] = fields[2]
    for p in built:
        version = core.get(str(p), "no go.gazette.dev/core in its build info")
        lines.append(f"{p.name}: go.gazette.dev/core {version}, {toolchain.get(str(p), '?')} ({p})")
    missing_peers = [name for name in PEERS if not (peers_bin() / name).is_file()]
    if missing_peers:
        lines.append(f"peers not built: {', '.join(missing_peers)}; install: {STREAM_SUM_STEP}")
    return lines


def _built_jar(pattern: str) -> Path | None:
    return next((Path(p) for p in sorted(glob.glob(str(REPO / "build" / pattern)))), None)


def _kafka() -> str:
    """The version Kafka's jars report (kafka-clients' kafka-version.properties, which Kafka's
    AppInfoParser prints as its version), read without starting a JVM."""
    jar = _built_jar("kafka/broker/kafka-clients-*.jar")
    if jar is None:
        return f"jars not fetched; install: {KAFKA_JARS_STEP}"
    try:
        with zipfile.ZipFile(jar) as z:
            props = z.read("kafka/kafka-version.properties").decode()
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        return f"{jar.name}: no version ({exc})"
    fields = dict(re.findall(r"^(\w+)=(.*)$", props, re.M))
    return f"{fields.get('version', '?')} (commit {fields.get('commitId', '?')}, {jar.parent})"


def _delta() -> str:
    where = os.environ.get("FRAGMENTS_IO_DELTA_JARS") or str(REPO / "build" / "delta" / "jars")
    jar = next((Path(p) for p in sorted(glob.glob(os.path.join(where, "delta-spark_*.jar")))), None)
    if jar is None:
        return f"jars not fetched; install: {DELTA_JARS_STEP}"
    return f"{jar.stem} ({jar.parent})"


def report_lines() -> list[str]:
    """One line per service and peer: its own version output, or that it is missing and the step that
    installs it. The probes run at once, each bounded by VERSION_TIMEOUT_S."""
    probes = {"etcd": _etcd, "postgres": _postgres, "chromium": _chromium, "java": _java, "kafka": _kafka}
    probes["delta"] = _delta
    with ThreadPoolExecutor(max_workers=len(probes) + 1) as pool:
        peers = pool.submit(_peers)
        results = {name: pool.submit(probe) for name, probe in probes.items()}
        services = [f"{name}: {result.result()}" for name, result in results.items()]
        ci = "CI set: a missing one fails its tests" if under_ci() else "CI unset: a missing one skips them"
        return [ci, *services, *peers.result()]
