"""Store health checks: healthy stores, failing ones with the retry schedule, recovery."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import boto3
import pytest

from gazette.fragment.health import (
    FAILING_RETRY_S,
    HEALTHY_RECHECK_S,
    StoreHealth,
    check_delete,
    health_of,
    stop_all_health,
)
from gazette.fragment.stores import get_store
from gazette.protocol.errors import ValidationError

FAST_RETRY_S = (0.0, 0.01, 0.02)


@pytest.fixture(autouse=True)
async def _stop_health_loops() -> AsyncIterator[None]:
    yield
    await stop_all_health()


async def test_file_store_is_healthy(file_store_url: str) -> None:
    health = StoreHealth(file_store_url)
    assert not health.healthy and health.error is None
    await health.check()
    assert health.healthy and health.error is None and health.checks == 1
    root = Path(file_store_url[len("file://") :])
    assert (root / ".test" / "health-check").read_bytes() == b"health-check\n"  # Gazette's bytes
    assert await health.wait_healthy() is None


async def test_s3_store_is_healthy_through_health_of(s3_store_url: str) -> None:
    health = health_of(s3_store_url)
    assert health_of(s3_store_url) is health
    assert await health.wait_healthy() is None  # starts the check loop lazily
    assert health.healthy
    assert get_store(s3_store_url).exists(".test/health-check")


def test_health_of_validates_the_url() -> None:
    with pytest.raises(ValidationError, match="ftp://x/"):
        health_of("ftp://x/")


async def test_down_store_fails_after_max_checks(closed_endpoint: str, aws_dummy_credentials: None) -> None:
    url = f"s3://bucket/p/?endpoint={closed_endpoint}&region=us-east-1"
    health = StoreHealth(url, failing_retry_s=FAST_RETRY_S, jitter_fraction=0.0)
    error = await health.wait_healthy(max_failed_checks=3)
    assert error is not None and closed_endpoint in error
    assert health.checks >= 3 and not health.healthy and health.error == error
    await health.stop()


async def test_failing_store_recovers(moto_server: str) -> None:
    # The bucket doesn't exist yet: checks fail until it is created, then the store turns healthy.
    bucket = "recovering-bucket"
    url = f"s3://{bucket}/p/?endpoint={moto_server}&region=us-east-1"
    health = StoreHealth(url, failing_retry_s=FAST_RETRY_S, jitter_fraction=0.0)
    error = await health.wait_healthy(max_failed_checks=2)
    assert error is not None and "NoSuchBucket" in error

    waiter = asyncio.ensure_future(health.wait_healthy(max_failed_checks=1_000_000))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await asyncio.to_thread(
        lambda: boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1").create_bucket(
            Bucket=bucket
        )
    )
    assert await asyncio.wait_for(waiter, 30) is None
    assert health.healthy and health.error is None
    await health.stop()


def test_retry_schedule_and_jitter(file_store_url: str) -> None:
    health = StoreHealth(file_store_url)
    assert FAILING_RETRY_S == (0.0, 0.1, 1.0, 1.0, 10.0, 10.0, 100.0)
    # Reference 2.6: 0, 0.1, 1, 1, 10, 10, then 100 s for every further failure.
    expected = [0, 0.1, 1, 1, 10, 10, 100, 100, 100, 100, 100, 100]
    for failures, base in enumerate(expected):
        for _ in range(20):
            assert 0.8 * base <= health._next_delay_s(failures) <= 1.2 * base
    health.healthy = True
    assert 0.8 * HEALTHY_RECHECK_S <= health._next_delay_s(0) <= 1.2 * HEALTHY_RECHECK_S


async def test_gazettes_payload_is_healthy_and_anything_else_is_not(
    file_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Brokers sharing a store (Gazette's and ours) all write Gazette's exact health-check content;
    reading back anything else (as a Gazette broker would then also see) is a broken store."""
    store_type = type(get_store(file_store_url))
    read_back = [b"health-check\n"]
    monkeypatch.setattr(store_type, "get", lambda self, path: read_back[0])
    health = StoreHealth(file_store_url)
    await health.check()
    assert health.healthy and health.error is None
    read_back[0] = b"gazette health check 0f5e at 1.0\n"  # what gazette-py wrote before
    await health.check()
    assert not health.healthy
    assert health.error is not None and "not the b'health-check\\n' written" in health.error


async def test_delete_probe_puts_and_removes_under_the_prefix(file_store_url: str, monkeypatch) -> None:
    root = Path(file_store_url[len("file://") :])
    assert await check_delete(file_store_url, "recovery/logs/") is None
    assert not (root / "recovery" / "logs" / ".gazette-delete-probe").exists()
    store_type = type(get_store(file_store_url))

    def refuse(self, path):
        raise PermissionError("no delete for you")

    monkeypatch.setattr(store_type, "remove", refuse)
    error = await check_delete(file_store_url, "recovery/logs/")
    assert error is not None and "delete-probe DELETE of recovery/logs/.gazette-delete-probe failed" in error
