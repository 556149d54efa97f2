"""`gazette broker serve`: runs one Broker until SIGTERM (graceful: drain and persist) or SIGINT.

When ready it prints one JSON line to stdout ({"endpoint", "metrics", "zone", "suffix", "pid"}),
which is how LocalCluster learns the port it bound as port 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys

from gazette.broker.broker import Broker


async def serve(broker: Broker) -> None:
    await broker.start()
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
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await broker.stop(graceful=True)


def run(broker: Broker, log_level: str = "WARNING") -> None:
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    asyncio.run(serve(broker))
