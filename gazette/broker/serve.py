"""`gazette broker serve`: runs one Broker until SIGTERM (graceful: drain and persist) or SIGINT.

When ready it prints one JSON line to stdout ({"endpoint", "metrics", "zone", "suffix", "pid"}),
which is how LocalCluster learns the port it bound as port 0. A broker that lost its etcd lease
stops by itself; the process then exits with LEASE_LOST_EXIT_CODE. SIGUSR2 writes every asyncio
task's stack to the log (stderr), for a broker that seems stuck.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

from gazette.broker.broker import Broker
from gazette.logsetup import configure
from gazette.tasks import dump_tasks

LEASE_LOST_EXIT_CODE = 3


async def serve(broker: Broker) -> None:
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR2, dump_tasks)  # what each task waits on, to the log
    # Ready only once the handlers are in place: a signal sent at once must not kill it unhandled.
    print(
        json.dumps(
            {
                "endpoint": broker.endpoint,
                "metrics": broker.metrics_endpoint,
                "zone": broker.zone,
                "suffix": broker.suffix,
                "pid": os.getpid(),
            }
        ),
        flush=True,
    )
    signalled = asyncio.ensure_future(stop.wait())
    stopped = asyncio.ensure_future(broker.stopped.wait())  # by itself: its lease was lost
    await asyncio.wait({signalled, stopped}, return_when=asyncio.FIRST_COMPLETED)
    signalled.cancel()
    stopped.cancel()
    await broker.stop(graceful=True)
    if broker.lease_lost.is_set():
        # Lease loss ends the process, so that its supervisor starts a fresh one
        # (docs/semantics.md#member-sessions).
        raise SystemExit(LEASE_LOST_EXIT_CODE)


def run(broker: Broker, log_level: str | None = None, log_format: str | None = None) -> None:
    """Serves until signalled, logging to stderr at `log_level` in `log_format` (gazette.logsetup;
    None: as configured already, e.g. by `gazette --log-format`, else warning and text)."""
    configure(log_level, log_format)
    asyncio.run(serve(broker))
