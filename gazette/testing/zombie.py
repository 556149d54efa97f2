"""Making a zombie primary on purpose, for fencing tests: a test entry point, kept out of production.

A zombie is a member that still believes it is primary of what it holds after it lost its lease:
`hold_etcd_view(consumer)` freezes the member's KeySpace (no updates are applied any more) and
detaches the member from its lease's loss, so only the stores' fences can stop it.
`python -m gazette.testing.zombie consumer run ...` is `gazette consumer run` with SIGUSR1 wired to
it; tests and notebook 07 start such members with `run_consumer(..., entry_module=ENTRY_MODULE)`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

log = logging.getLogger(__name__)

ENTRY_MODULE = __name__  # ConsumerGroup's entry_module for members that SIGUSR1 makes zombies


def hold_etcd_view(consumer: Any) -> None:
    """From now on `consumer` (a gazette.consumer.Consumer) acts on its current view of etcd, applying
    no updates and never told that its lease was lost: a zombie of whatever it is primary of."""
    log.warning("consumer %s: TEST HOOK: holding its etcd view (a zombie from now on)", consumer.suffix)
    consumer.session.remove_lost_callback(consumer._on_lease_lost)
    consumer.ks.hold()


def main() -> None:
    """`gazette consumer run` (argv as the CLI's), whose member a SIGUSR1 makes a zombie."""
    from gazette.cli.main import main as cli_main
    from gazette.consumer import serve as serve_module

    serve = serve_module.serve

    async def serve_zombie_on_sigusr1(consumer: Any) -> None:
        # Before serve() prints the ready line: a SIGUSR1 sent once the member is ready is handled.
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, hold_etcd_view, consumer)
        await serve(consumer)

    serve_module.serve = serve_zombie_on_sigusr1  # this process only: it is a test's consumer member
    cli_main()


if __name__ == "__main__":
    main()
