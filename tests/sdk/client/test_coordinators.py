"""CoordinatorLookup against librdkafka's mock cluster (3 brokers) and the reference broker."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sdk.client import KafkaClient
from sdk.client.coordinators import CoordinatorLookup, CoordinatorType
from sdk.protocol.messages import FindCoordinatorRequest

pytestmark = pytest.mark.timeout(60)


def _broker_has_find_coordinator(bootstrap: str) -> bool:
    async def check() -> bool:
        client = KafkaClient(bootstrap)
        await client.start()
        try:
            conn = await client.get_connection(await client.wait_for_node())
            return conn.supports(FindCoordinatorRequest.API_KEY)
        finally:
            await client.close()

    return asyncio.run(check())


async def _lookups(bootstrap: str, groups: list[str]) -> tuple[dict[str, int], set[int], CoordinatorLookup]:
    client = KafkaClient(bootstrap)
    await client.start()
    try:
        lookup = CoordinatorLookup(client, timeout_ms=10000)
        nodes = await asyncio.gather(*(lookup.coordinator(CoordinatorType.GROUP, g) for g in groups))
        known = set(client.cluster.brokers)
        # Cached: the same answers without another request.
        again = [lookup.cached(CoordinatorType.GROUP, g) for g in groups]
        assert again == list(nodes)
        return dict(zip(groups, nodes, strict=True)), known, lookup
    finally:
        await client.close()


async def test_mock_cluster_answers_group_coordinators(mock_cluster: object) -> None:
    groups = [f"g-{uuid.uuid4().hex[:8]}-{i}" for i in range(12)]
    answers, brokers, _ = await _lookups(mock_cluster.bootstrap, groups)  # type: ignore[attr-defined]
    assert set(answers.values()) <= brokers
    # The mock spreads groups over its brokers by hash: 12 groups do not all land on one.
    assert len(set(answers.values())) > 1


async def test_invalidate_forgets_only_the_named_node(mock_cluster: object) -> None:
    client = KafkaClient(mock_cluster.bootstrap)  # type: ignore[attr-defined]
    await client.start()
    try:
        lookup = CoordinatorLookup(client)
        node = await lookup.coordinator(CoordinatorType.GROUP, "group-invalidate")
        lookup.invalidate(CoordinatorType.GROUP, "group-invalidate", node_id=node + 100)
        assert lookup.cached(CoordinatorType.GROUP, "group-invalidate") == node
        lookup.invalidate(CoordinatorType.GROUP, "group-invalidate", node_id=node)
        assert lookup.cached(CoordinatorType.GROUP, "group-invalidate") is None
        assert await lookup.coordinator(CoordinatorType.GROUP, "group-invalidate") == node
    finally:
        await client.close()


async def test_mock_cluster_answers_transaction_coordinators(mock_cluster: object) -> None:
    client = KafkaClient(mock_cluster.bootstrap)  # type: ignore[attr-defined]
    await client.start()
    try:
        lookup = CoordinatorLookup(client)
        node = await lookup.coordinator(CoordinatorType.TRANSACTION, "txn-1")
        assert node in client.cluster.brokers
        assert lookup.cached(CoordinatorType.GROUP, "txn-1") is None
    finally:
        await client.close()


async def test_reference_broker_is_its_own_coordinator(broker: object) -> None:
    bootstrap = broker.bootstrap  # type: ignore[attr-defined]
    if not await asyncio.to_thread(_broker_has_find_coordinator, bootstrap):
        pytest.skip("the reference broker does not serve FindCoordinator yet")
    answers, brokers, _ = await _lookups(bootstrap, ["a", "b", "c"])
    assert set(answers.values()) == brokers and len(brokers) == 1
