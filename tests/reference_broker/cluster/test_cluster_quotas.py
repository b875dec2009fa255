"""Client quotas on a replicated cluster: altered once through any broker, described and enforced
by every broker, as Kafka's KRaft brokers forward AlterClientQuotas to the controller
(ClientQuotaControlManager writes ClientQuotaRecords) and apply the metadata image's quotas
(DynamicClientQuotaPublisher -> ClientQuotaManager).

A real three-node cluster; every request goes over a raw connection to the node it names, so each
answer is that node's own. Enforcement is checked through ``producer_byte_rate``: a Produce from a
client id whose quota is 1 byte/s is answered with ``throttle_time_ms > 0`` by a node that holds
the quota, whatever the Produce's own outcome (Kafka records a produce request's size against the
quota in every case); the throttle arithmetic itself is covered by the single-node tests
(tests/reference_broker/network/test_client_quotas.py). What must hold: a quota altered through
node 1 is described and enforced by nodes 2 and 3, and its removal through node 3 removes it
everywhere; a bad entity or key gets INVALID_REQUEST from any node and changes nothing while a
good entry beside it is applied everywhere; quotas survive a restart of every node (replayed from
the metadata log and its snapshots).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from reference_broker.testing import ClusterProcess, wait_until
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
    ProduceRequest,
)
from sdk.records import RecordBatchBuilder
from tests.reference_broker.wire import WireClient

pytestmark = [pytest.mark.interop, pytest.mark.slow]

NODES = 3
EVERY = range(1, NODES + 1)
CONFIG: dict[str, Any] = {
    # Snapshots every few records, so a restarted node loads the quotas from one.
    "metadata.log.max.record.bytes.between.snapshots": 2048,
}
DEADLINE_S = 30.0
MATCH_EXACT = 0
Entry = AlterClientQuotasRequest.EntryData


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    data = tmp_path_factory.mktemp("quota-cluster") / "data"
    with ClusterProcess(NODES, CONFIG, data_dir=data) as running:
        yield running


def request_to(
    cluster: ClusterProcess, node_id: int, request: Any, version: int, client_id: str = "admin"
) -> Any:
    """``request`` answered by node ``node_id`` on a fresh connection as ``client_id``."""
    with WireClient(cluster.node(node_id).bootstrap, timeout=DEADLINE_S + 10, client_id=client_id) as client:
        return client.request(request, version)


def entry(pairs: list[tuple[str, str | None]], key: str, value: float = 0.0, *, remove: bool = False) -> Any:
    return Entry(
        entity=[Entry.EntityData(entity_type=t, entity_name=n) for t, n in pairs],
        ops=[Entry.OpData(key=key, value=value, remove=remove)],
    )


def alter(
    cluster: ClusterProcess, node_id: int, entries: list[Any], *, validate_only: bool = False
) -> list[Any]:
    """(error code, error message) per entry of AlterClientQuotas answered by node ``node_id``."""
    answer = request_to(
        cluster, node_id, AlterClientQuotasRequest(entries=entries, validate_only=validate_only), 1
    )
    return [(e.error_code, e.error_message) for e in answer.entries]


def quotas_of(cluster: ClusterProcess, node_id: int, client_id: str) -> dict[str, float]:
    """The quotas node ``node_id`` describes for the entity ``client-id=<client_id>`` alone."""
    component = DescribeClientQuotasRequest.ComponentData(
        entity_type="client-id", match_type=MATCH_EXACT, match=client_id
    )
    answer = request_to(cluster, node_id, DescribeClientQuotasRequest(components=[component], strict=True), 1)
    assert answer.error_code == ErrorCode.NONE, answer
    found: dict[str, float] = {}
    for described in answer.entries:
        found.update({value.key: value.value for value in described.values})
    return found


def _describes(cluster: ClusterProcess, node_id: int, client_id: str, expected: dict[str, float]) -> bool:
    return quotas_of(cluster, node_id, client_id) == expected


def wait_described(cluster: ClusterProcess, client_id: str, expected: dict[str, float]) -> None:
    for node_id in EVERY:
        wait_until(
            partial(_describes, cluster, node_id, client_id, expected),
            f"node {node_id} describes {expected} for client-id {client_id}",
            DEADLINE_S,
        )


def produce_throttle_ms(cluster: ClusterProcess, node_id: int, client_id: str) -> int:
    """The throttle time node ``node_id`` answers a small Produce from ``client_id`` with."""
    builder = RecordBatchBuilder()
    builder.append(1_700_000_000_000, None, b"x" * 200)
    partition = ProduceRequest.PartitionProduceData(index=0, records=builder.build())
    request = ProduceRequest(
        acks=1,
        timeout_ms=5000,
        topic_data=[ProduceRequest.TopicProduceData(name="quota-probe", partition_data=[partition])],
    )
    return int(request_to(cluster, node_id, request, 9, client_id=client_id).throttle_time_ms)


def _throttles(cluster: ClusterProcess, node_id: int, client_id: str) -> bool:
    return produce_throttle_ms(cluster, node_id, client_id) > 0


def test_quota_altered_through_one_node_is_described_and_enforced_by_every_node(
    cluster: ClusterProcess,
) -> None:
    client = f"limited-{uuid.uuid4().hex[:6]}"
    for node_id in EVERY:
        assert quotas_of(cluster, node_id, client) == {}
        assert produce_throttle_ms(cluster, node_id, client) == 0

    assert alter(cluster, 1, [entry([("client-id", client)], "producer_byte_rate", 1.0)]) == [
        (ErrorCode.NONE, None)
    ]
    wait_described(cluster, client, {"producer_byte_rate": 1.0})
    for node_id in (2, 3):
        assert produce_throttle_ms(cluster, node_id, client) > 0, f"node {node_id} does not throttle"

    assert alter(cluster, 3, [entry([("client-id", client)], "producer_byte_rate", remove=True)]) == [
        (ErrorCode.NONE, None)
    ]
    wait_described(cluster, client, {})
    for node_id in EVERY:
        assert produce_throttle_ms(cluster, node_id, client) == 0, f"node {node_id} still throttles"


def test_bad_alterations_get_invalid_request_from_any_node_and_change_nothing(
    cluster: ClusterProcess,
) -> None:
    good = f"good-{uuid.uuid4().hex[:6]}"
    bad = f"bad-{uuid.uuid4().hex[:6]}"
    for node_id in EVERY:
        answer = alter(
            cluster,
            node_id,
            [
                entry([("group", bad)], "producer_byte_rate", 1.0),
                entry([("client-id", bad)], "bogus_rate", 1.0),
                entry([("client-id", bad), ("ip", "127.0.0.1")], "producer_byte_rate", 1.0),
                entry([("user", bad)], "producer_byte_rate", 10.5),
            ],
        )
        assert answer == [
            (ErrorCode.INVALID_REQUEST, "Unhandled client quota entity type: group"),
            (ErrorCode.INVALID_REQUEST, "Invalid configuration key bogus_rate"),
            (
                ErrorCode.INVALID_REQUEST,
                "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
            ),
            (ErrorCode.INVALID_REQUEST, "producer_byte_rate cannot be a fractional value."),
        ], f"node {node_id}"
    # validate_only answers as the change would be answered and writes nothing.
    checked = alter(cluster, 2, [entry([("client-id", bad)], "producer_byte_rate", 5.0)], validate_only=True)
    assert checked == [(ErrorCode.NONE, None)]
    # Each entity is decided on its own: the good entry beside a bad one is applied everywhere.
    mixed = alter(
        cluster,
        2,
        [
            entry([("client-id", good)], "consumer_byte_rate", 2048.0),
            entry([("client-id", bad)], "request_percentage", -1.0),
        ],
    )
    assert mixed == [
        (ErrorCode.NONE, None),
        (ErrorCode.INVALID_REQUEST, "Quota request_percentage must be greater than 0"),
    ]
    wait_described(cluster, good, {"consumer_byte_rate": 2048.0})
    for node_id in EVERY:
        assert quotas_of(cluster, node_id, bad) == {}


def snapshots(cluster: ClusterProcess, node_id: int) -> set[str]:
    """The metadata snapshot files node ``node_id`` has written (``<offset>-<epoch>.checkpoint``)."""
    return {path.name for path in cluster.node(node_id).process.data_dir.glob("**/*.checkpoint")}


def test_quotas_survive_a_restart_of_every_node(cluster: ClusterProcess) -> None:
    client = f"durable-{uuid.uuid4().hex[:6]}"
    assert alter(cluster, 2, [entry([("client-id", client)], "producer_byte_rate", 1.0)]) == [
        (ErrorCode.NONE, None)
    ]
    wait_described(cluster, client, {"producer_byte_rate": 1.0})
    # Every node's image holds the quota now: a snapshot any node writes from here on states it,
    # and a restarted node loads its latest snapshot before the rest of the log.
    before = {n: snapshots(cluster, n) for n in EVERY}
    padding = 0

    def every_node_snapshotted_again() -> bool:
        nonlocal padding
        if all(snapshots(cluster, n) - before[n] for n in EVERY):
            return True
        padding += 1
        assert alter(
            cluster,
            1,
            [entry([("client-id", f"{client}-pad-{padding}")], "producer_byte_rate", 1000.0 + padding)],
        ) == [(ErrorCode.NONE, None)]
        return False

    wait_until(every_node_snapshotted_again, "a metadata snapshot on every node", 60)

    for node_id in EVERY:
        cluster.stop(node_id)
    for node_id in EVERY:
        cluster.node(node_id).process.launch()
    for node_id in EVERY:
        cluster.node(node_id).process.wait_listening()
    cluster.wait_until_registered()

    wait_described(cluster, client, {"producer_byte_rate": 1.0})
    for node_id in EVERY:
        wait_until(
            partial(_throttles, cluster, node_id, client),
            f"node {node_id} throttles {client} after the restart",
            DEADLINE_S,
        )
