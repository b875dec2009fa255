"""A crashed node's first answers after its restart, on ours and Apache Kafka's cluster.

A restarted node rebuilds its metadata image from the quorum; until then it knows no topic and no
broker. Kafka binds the node's ports at start but enables request processing only once the
controller says its metadata caught up (BrokerServer, ``initialCatchUpFuture``), so no client ever
sees that empty image. Ours answered from it, and librdkafka took the topic for deleted: kcat's
consumer, reading a partition through its leader's crash, stopped with "desired partition is no
longer available".
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from reference_broker.testing import request_metadata
from tests.reference_broker.cluster.three_nodes import ThreeNodes, create_topic, until

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def first_answer(address: str, topic: str) -> Any:
    """The node's first Metadata answer: connections refused while it is down are retried, a
    connection it holds unanswered is waited on."""
    return until(lambda: request_metadata(address, [topic], timeout=60.0),
                 f"the restarted node at {address} answers Metadata", 120)


def test_a_restarted_node_answers_clients_only_once_it_knows_the_cluster(nodes: ThreeNodes) -> None:
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    create_topic(nodes.bootstrap, topic, partitions=1)
    victim = nodes.leader_of(topic, 0)
    nodes.crash_and_restart(victim)
    answer = first_answer(nodes.address_of(victim), topic)
    brokers = {b.node_id for b in answer.brokers}
    assert len(brokers) >= 2, f"the first answer lists brokers {sorted(brokers)}"
    [described] = answer.topics
    assert described.error_code == 0, f"the first answer says {described.error_code} for {topic}"
    [partition] = described.partitions
    assert set(partition.replica_nodes) == {1, 2, 3}
    assert partition.leader_id in brokers, (partition.leader_id, sorted(brokers))
