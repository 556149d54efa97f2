"""Child processes that die with their owner: spawn, PR_SET_PDEATHSIG, graceful terminate, free ports.

Imports only the standard library. The invariant: a child started through `spawn` receives SIGKILL
when its owner process dies, however it dies (a SIGKILL of the owner included), so a crashed test
or notebook never leaves an etcd or broker running.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

# Runs in a fresh interpreter (no Python runs between fork and exec): set the parent-death signal,
# make sure the owner did not die before it took effect, then become the real program.
_TRAMPOLINE = """
import ctypes, ctypes.util, os, signal, sys
try:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_PDEATHSIG) failed: " + os.strerror(ctypes.get_errno()))
if os.getppid() != int(sys.argv[1]):
    os._exit(70)
os.execvp(sys.argv[2], sys.argv[2:])
"""


class _Spawner:
    """One daemon thread per process that forks every child, so no child is killed early by the
    exit of a short-lived thread (an executor worker, say) that happened to start it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[
            tuple[Callable[[], subprocess.Popen[Any]], concurrent.futures.Future[Any]]
        ]
        self._queue = queue.SimpleQueue()
        self._pid = 0

    def run(self, fn: Callable[[], subprocess.Popen[Any]]) -> subprocess.Popen[Any]:
        with self._lock:
            if self._pid != os.getpid():  # first use, or this process was forked since
                self._queue = queue.SimpleQueue()
                threading.Thread(
                    target=self._loop, args=(self._queue,), name="gazette-spawner", daemon=True
                ).start()
                self._pid = os.getpid()
            done: concurrent.futures.Future[subprocess.Popen[Any]] = concurrent.futures.Future()
            self._queue.put((fn, done))
        return done.result()

    @staticmethod
    def _loop(
        q: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen[Any]], concurrent.futures.Future[Any]]],
    ) -> None:
        while True:
            fn, done = q.get()
            try:
                done.set_result(fn())
            except BaseException as exc:  # handed to the caller, which re-raises it
                done.set_exception(exc)


_spawner = _Spawner()


def spawn(args: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """Starts `args` in its own process group, dying with this process (SIGKILL on Linux).

    Forked from a process-lifetime thread; on Linux through a small exec trampoline that sets the
    parent-death signal, so no Python runs in the forked child (the returned Popen's pid is the
    program's: the trampoline execs it). Keyword arguments go to Popen.
    """
    for taken in ("preexec_fn", "process_group", "start_new_session"):
        if taken in popen_kwargs:
            raise ValueError(f"spawn sets {taken} itself")
    argv = list(args)
    if sys.platform.startswith("linux"):
        argv = [sys.executable, "-I", "-S", "-c", _TRAMPOLINE, str(os.getpid()), *argv]
    return _spawner.run(lambda: subprocess.Popen(argv, process_group=0, **popen_kwargs))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that was free a moment ago (callers retry if it is taken meanwhile)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def terminate(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM (and SIGCONT, so a paused child can act on it), wait up to `timeout`, then SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            proc.kill()
        except ProcessLookupError:
            pass
        proc.wait()


def terminate_all(procs: Sequence[subprocess.Popen[Any]], timeout: float) -> list[subprocess.Popen[Any]]:
    """`terminate` for several processes under one deadline (not one timeout each): SIGTERM (and
    SIGCONT) all, wait until `timeout` has passed, SIGKILL the rest. Returns the killed ones."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        try:
            p.send_signal(signal.SIGTERM)
            p.send_signal(signal.SIGCONT)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    killed = []
    for p in live:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                p.kill()
            except ProcessLookupError:
                pass
            p.wait()
            killed.append(p)
    return killed


def read_ready_line(proc: subprocess.Popen[Any], timeout: float) -> dict[str, Any] | None:
    """The JSON "ready" line a served process (`gazette broker serve`, `gazette consumer run`)
    prints on stdout once listening, or None if it exits or says nothing within `timeout`."""
    result: list[dict[str, Any]] = []

    def read() -> None:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line:
            try:
                result.append(json.loads(line))
            except ValueError:
                pass

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(timeout)
    return result[0] if result else None
