"""Making a zombie primary on purpose, for fencing tests (kept out of the production classes).

A zombie is a member that still believes it is primary of what it holds after it lost its lease:
`hold_etcd_view(consumer)` freezes the member's KeySpace (no updates are applied any more) and has it
ignore the loss of its lease, so only the stores' fences can stop it. `gazette consumer run` wires
it to SIGUSR1 when GAZETTE_TEST_HOLD_VIEW_ON_SIGUSR1=1 (gazette.consumer.serve), which is how tests
turn a consumer process into a zombie; nothing else calls it.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def hold_etcd_view(consumer: Any) -> None:
    """From now on `consumer` (a gazette.consumer.Consumer) acts on its current view of etcd, applying
    no updates and ignoring the loss of its lease: a zombie of whatever it is primary of."""
    log.warning("consumer %s: TEST HOOK: holding its etcd view (a zombie from now on)", consumer.suffix)
    consumer._ignores_lease_loss = lambda: True  # this instance only: the member's lease policy is bypassed
    consumer.ks.hold()
