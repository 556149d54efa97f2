"""Store health checks (docs/semantics.md#fragment-stores), as Gazette runs them: PUT `.test/health-check`
with Gazette's exact content, GET and compare, LIST `.test/`, sign a GET and (for http(s) URLs) fetch it;
healthy stores are rechecked every 30 min, failing ones after 0, 0.1, 1, 1, 10, 10, then every 100 s, each
with ±20% jitter. The content is Gazette's own because brokers of both kinds may share a store and check the
same path at once: anything else written there fails a Gazette broker's comparison. One StoreHealth per URL
(`health_of`); its check loop is started by the first `wait_healthy` and owned by the module
(`stop_all_health`). `check_delete` is the on-demand delete probe of the FragmentStoreHealth RPC.
"""

from __future__ import annotations

import asyncio
import logging
import random
import urllib.request
from collections.abc import Sequence

from gazette.fragment.stores import get_store

log = logging.getLogger(__name__)

HEALTHY_RECHECK_S = 30 * 60.0
FAILING_RETRY_S = (0.0, 0.1, 1.0, 1.0, 10.0, 10.0, 100.0)  # the last one repeats
JITTER_FRACTION = 0.2
HEALTH_CHECK_PATH = ".test/health-check"
HEALTH_CHECK_CONTENT = b"health-check\n"  # Gazette's, byte for byte
DELETE_PROBE_NAME = ".gazette-delete-probe"
DELETE_PROBE_CONTENT = b"gazette-delete-probe\n"
SIGNED_FETCH_TIMEOUT_S = 10.0


class StoreHealth:
    """The health of one store URL, refreshed by a background check loop."""

    def __init__(
        self,
        url: str,
        *,
        healthy_recheck_s: float = HEALTHY_RECHECK_S,
        failing_retry_s: Sequence[float] = FAILING_RETRY_S,
        jitter_fraction: float = JITTER_FRACTION,
    ) -> None:
        self.url = url
        self.healthy_recheck_s = healthy_recheck_s
        self.failing_retry_s = tuple(failing_retry_s)
        self.jitter_fraction = jitter_fraction
        self.healthy = False
        self.error: str | None = None
        self.checks = 0  # completed checks
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None
        self._checked: asyncio.Event | None = None  # set, then replaced, after every check

    def __repr__(self) -> str:
        state = "healthy" if self.healthy else f"unhealthy ({self.error})" if self.checks else "unchecked"
        return f"StoreHealth({self.url!r}, {state})"

    async def check(self) -> None:
        """Runs one check now (in a thread) and records its outcome; never raises for store errors."""
        self._bind()
        assert self._lock is not None
        async with self._lock:
            try:
                await asyncio.to_thread(self._check_blocking)
            except Exception as e:
                error = f"{type(e).__name__}: {e}"
                if error != self.error:  # log changes, not every retry
                    log.warning("fragment store %s is unhealthy: %s", self.url, error)
                self.healthy, self.error = False, error
            else:
                if not self.healthy and self.checks:
                    log.info("fragment store %s is healthy again", self.url)
                self.healthy, self.error = True, None
            self.checks += 1
            assert self._checked is not None
            self._checked.set()
            self._checked = asyncio.Event()

    def _check_blocking(self) -> None:
        store = get_store(self.url)
        store.put(HEALTH_CHECK_PATH, HEALTH_CHECK_CONTENT)
        got = store.get(HEALTH_CHECK_PATH)
        # Every broker sharing the store (Gazette's or ours) writes these same bytes.
        if got != HEALTH_CHECK_CONTENT:
            raise ValueError(
                f"{HEALTH_CHECK_PATH} read back {got[:64]!r}, not the {HEALTH_CHECK_CONTENT!r} written"
            )
        listed = [e.path for e in store.list(".test/")]
        if "health-check" not in listed:
            raise ValueError(f"listing .test/ does not show health-check (got {listed[:5]})")
        signed = store.sign_get(HEALTH_CHECK_PATH, 60.0)
        if signed.startswith(("http://", "https://")):
            with urllib.request.urlopen(signed, timeout=SIGNED_FETCH_TIMEOUT_S) as resp:
                if resp.read() != HEALTH_CHECK_CONTENT:
                    raise ValueError(f"signed GET of {HEALTH_CHECK_PATH} returned other content")

    async def wait_healthy(self, max_failed_checks: int = 5) -> str | None:
        """None once the store is healthy, else the last error after `max_failed_checks` failed checks.

        Starts the check loop if needed. A store already known healthy returns at once.
        """
        self._ensure_running()
        failed = 0
        while True:
            if self.healthy:
                return None
            if self.checks and self.error is not None and failed >= max_failed_checks:
                return self.error
            assert self._checked is not None
            await self._checked.wait()
            if not self.healthy:
                failed += 1

    async def status(self) -> str | None:
        """The outcome of the latest check (None: healthy), waiting for a first check if none ran yet."""
        self._ensure_running()
        while not self.checks:
            assert self._checked is not None
            await self._checked.wait()
        return None if self.healthy else self.error

    def _bind(self) -> None:
        # Events and locks belong to one loop: rebuild them when used from another (e.g. a new test loop).
        loop = asyncio.get_running_loop()
        if self._task is not None and self._task.get_loop() is not loop:
            self._task = None
        if self._lock is None or self._loop is not loop:
            self._loop = loop
            self._lock = asyncio.Lock()
            self._checked = asyncio.Event()

    def _ensure_running(self) -> None:
        self._bind()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"gazette-store-health {self.url}"
            )

    def _next_delay_s(self, failures: int) -> float:
        if self.healthy:
            base = self.healthy_recheck_s
        else:
            base = self.failing_retry_s[min(failures, len(self.failing_retry_s) - 1)]
        return base * random.uniform(1 - self.jitter_fraction, 1 + self.jitter_fraction)

    async def _run(self) -> None:
        failures = 0
        while True:
            await self.check()
            delay = self._next_delay_s(failures)
            failures = 0 if self.healthy else failures + 1
            await asyncio.sleep(delay)

    async def stop(self) -> None:
        """Cancels the check loop (it restarts on the next `wait_healthy`)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            if task.get_loop() is asyncio.get_running_loop():
                await asyncio.gather(task, return_exceptions=True)


async def check_delete(url: str, prefix: str) -> str | None:
    """Probes delete permission: puts a throwaway object under `prefix` and removes it. None if both
    worked, else what failed. Never run by the periodic check, which does not delete."""

    def probe() -> None:
        store = get_store(url)
        path = prefix + DELETE_PROBE_NAME
        try:
            store.put(path, DELETE_PROBE_CONTENT)
        except Exception as exc:
            raise ValueError(f"delete-probe PUT of {path} failed: {exc}") from exc
        try:
            store.remove(path)
        except Exception as exc:
            raise ValueError(f"delete-probe DELETE of {path} failed: {exc}") from exc

    try:
        await asyncio.to_thread(probe)
    except Exception as exc:
        return str(exc)
    return None


_HEALTH: dict[str, StoreHealth] = {}


def health_of(url: str) -> StoreHealth:
    """The StoreHealth of `url`, one per URL per process. Validates the URL (ValidationError)."""
    health = _HEALTH.get(url)
    if health is None:
        get_store(url)
        health = _HEALTH[url] = StoreHealth(url)
    return health


async def stop_all_health() -> None:
    """Stops every check loop started through `health_of` and forgets them."""
    healths = list(_HEALTH.values())
    _HEALTH.clear()
    for health in healths:
        await health.stop()
