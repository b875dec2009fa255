"""ListTransactions' transactional-id pattern on both brokers, Apache Kafka as the control: RE2
syntax and whole-string matching, a malformed pattern refused with INVALID_REGULAR_EXPRESSION, and
a pattern that makes a backtracking engine take exponential time answered at once while the
broker keeps serving everyone else."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from sdk import Producer
from sdk.admin import AdminClient
from sdk.errors import InvalidRegularExpressionError

from .conftest import Cluster

pytestmark = pytest.mark.interop


@pytest_asyncio.fixture
async def idle_transactional_ids(cluster: Cluster, name: Callable[[str], str]) -> AsyncIterator[list[str]]:
    """Two transactional ids the coordinator knows (InitProducerId done, no transaction open): one
    of 32 'a's then '!' (an input on which ``(a+)+`` backtracks for minutes), one ordinary."""
    suffix = name("x").split("-", 1)[1]
    ids = ["a" * 32 + "!" + suffix, name("orders-copier")]
    producers = [Producer(bootstrap_servers=cluster.bootstrap, transactional_id=i) for i in ids]
    for producer in producers:
        await producer.start()
    try:
        yield ids
    finally:
        for producer in producers:
            await producer.stop()


async def listed(admin: AdminClient, pattern: str) -> set[str]:
    return {t.transactional_id for t in await admin.list_transactions(transactional_id_pattern=pattern)}


async def test_a_backtracking_pattern_is_answered_at_once_and_the_broker_keeps_serving(
    admin: AdminClient, cluster: Cluster, idle_transactional_ids: list[str]
) -> None:
    catastrophic, _ = idle_transactional_ids
    # A backtracking matcher takes minutes on the catastrophic id; 30 s leaves a loaded runner
    # (a Kafka JVM starting a client's connections slowly) room while staying far from that.
    bound_s = 30
    started = time.monotonic()
    listing = asyncio.ensure_future(listed(admin, "(a+)+"))
    # Another request on another connection while the pattern is matched.
    probe = AdminClient(bootstrap_servers=cluster.bootstrap)
    await probe.start()
    try:
        await asyncio.wait_for(probe.list_topics(), timeout=bound_s)
    finally:
        await probe.close()
    assert catastrophic not in await asyncio.wait_for(listing, timeout=bound_s)
    assert time.monotonic() - started < bound_s
    assert catastrophic in await listed(admin, "a+!.*")


async def test_patterns_match_whole_ids_with_re2_syntax(
    admin: AdminClient, idle_transactional_ids: list[str]
) -> None:
    _, ordinary = idle_transactional_ids
    prefix = ordinary.split("-")[0]
    assert ordinary not in await listed(admin, prefix), "a prefix alone must not match: whole-id match"
    assert ordinary in await listed(admin, prefix + ".*")
    assert ordinary in await listed(admin, r"orders-copier-[\w-]+")


@pytest.mark.parametrize("pattern", ["(", "(a)\\1", "a{2,1}"])
async def test_a_malformed_or_non_re2_pattern_is_invalid_regular_expression(
    admin: AdminClient, pattern: str
) -> None:
    with pytest.raises(InvalidRegularExpressionError):
        await admin.list_transactions(transactional_id_pattern=pattern)
