"""ApiVersions of our broker against Apache Kafka 4.1's, both with Kafka's default settings: every
API whose advertised range differs is listed below with the reason the difference stays, and the
list is exactly the set of differences (a difference that disappears must leave the list too)."""

from __future__ import annotations

from typing import Any

import pytest

from reference_broker.testing import BrokerFactory
from sdk.protocol.messages import ApiVersionsRequest
from tests.reference_broker.wire import WireClient

pytestmark = [pytest.mark.apache_kafka, pytest.mark.interop]

_SINGLE_NODE = "single node: partition reassignment and leader election need the replicated cluster"
_SHARE_GROUPS = "share groups (KIP-932) are not implemented"
_KRAFT = "no KRaft controller quorum on this single node"
_TOKENS = "delegation tokens are not implemented"

#: API key -> why its range differs from Kafka 4.1's.
DIFFERENCES = {
    0: (
        "Produce: Kafka 4 advertises v0-2 only because of a librdkafka bug (KAFKA-18659) and "
        "rejects them; ours advertises what it serves, v3-13, and librdkafka works with it"
    ),
    34: "AlterReplicaLogDirs: one log directory, nothing to move between",
    38: _TOKENS,
    39: _TOKENS,
    40: _TOKENS,
    41: _TOKENS,
    43: _SINGLE_NODE,
    45: _SINGLE_NODE,
    46: _SINGLE_NODE,
    55: _KRAFT,
    57: "UpdateFeatures: a single node's transaction.version is its setting (a cluster serves it)",
    64: _KRAFT,
    74: "ListConfigResources (KIP-1142) is not implemented",
    76: _SHARE_GROUPS,
    77: _SHARE_GROUPS,
    78: _SHARE_GROUPS,
    79: _SHARE_GROUPS,
    80: _KRAFT,
    81: _KRAFT,
    83: _SHARE_GROUPS,
    84: _SHARE_GROUPS,
    85: _SHARE_GROUPS,
    86: _SHARE_GROUPS,
    87: _SHARE_GROUPS,
    90: _SHARE_GROUPS,
    91: _SHARE_GROUPS,
    92: _SHARE_GROUPS,
}


def advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
    client = WireClient(bootstrap)
    try:
        response: Any = client.request(
            ApiVersionsRequest(client_software_name="parity-test", client_software_version="1"), 3
        )
    finally:
        client.sock.close()
    assert response.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def test_every_api_version_difference_from_kafka_is_listed_with_its_reason(
    apache_kafka: Any, broker_factory: BrokerFactory
) -> None:
    ours = advertised(broker_factory({"transaction.two.phase.commit.enable": False}).bootstrap)
    kafka = advertised(apache_kafka.bootstrap)
    differing = {key for key in set(ours) | set(kafka) if ours.get(key) != kafka.get(key)}
    unexplained = {key: (ours.get(key), kafka.get(key)) for key in sorted(differing - set(DIFFERENCES))}
    gone = sorted(set(DIFFERENCES) - differing)
    assert not unexplained, f"(ours, Kafka's) ranges that differ without a reason: {unexplained}"
    assert not gone, f"listed as different but now equal: {gone}"
    assert not set(ours) - set(kafka), "ours advertises an API Kafka 4.1 does not"


def test_two_phase_commit_adds_init_producer_id_v6_only_where_enabled(broker_factory: BrokerFactory) -> None:
    assert advertised(broker_factory({"transaction.two.phase.commit.enable": False}).bootstrap)[22] == (0, 5)
    assert advertised(broker_factory({"transaction.two.phase.commit.enable": True}).bootstrap)[22] == (0, 6)
