"""OffsetForLeaderEpoch (23) on a single node answers as Apache Kafka 4.1 does: the same requests,
the same per-partition answers (epoch end offsets, leader epoch fencing, unknown partitions), for
every version both serve; and confluent-kafka's consumer, which sends it to validate its position
after a leader change (KIP-320), works against it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import OffsetForLeaderEpochRequest
from tests.reference_broker.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

Part = OffsetForLeaderEpochRequest.OffsetForLeaderPartition
Topic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic


def _prepare(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        producer.produce(topic, b"v%d" % i, partition=0)
        producer.flush(30)  # one batch each
    assert producer.flush(30) == 0


def _ask(bootstrap: str, topic: str, version: int) -> list[tuple[str, list[tuple[int, int, int, int]]]]:
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[
        Topic(topic=topic, partitions=[
            Part(partition=0, current_leader_epoch=-1, leader_epoch=0),
            Part(partition=0, current_leader_epoch=0, leader_epoch=-1),
            Part(partition=0, current_leader_epoch=0, leader_epoch=7),
            Part(partition=1, current_leader_epoch=0, leader_epoch=0),
            Part(partition=0, current_leader_epoch=1, leader_epoch=0),
            Part(partition=9, current_leader_epoch=-1, leader_epoch=0),
        ]),
        Topic(topic=topic + "-missing", partitions=[Part(partition=0, leader_epoch=0)]),
    ])
    with WireClient(bootstrap) as wire:
        response = wire.request(request, version)
    return [(t.topic, [(p.partition, p.error_code, p.leader_epoch, p.end_offset) for p in t.partitions])
            for t in response.topics]


@pytest.mark.apache_kafka
def test_answers_match_apache_kafka(broker: Any, apache_kafka: Any) -> None:
    topic = f"ofle-{uuid.uuid4().hex[:8]}"
    answers = {}
    for name, bootstrap in (("reference", broker.bootstrap), ("kafka", apache_kafka.bootstrap)):
        _prepare(bootstrap, topic)
        answers[name] = {v: _ask(bootstrap, topic, v) for v in (2, 3, 4)}
    assert answers["reference"] == answers["kafka"]
    assert answers["kafka"][4][0][1] == [
        (0, ErrorCode.NONE, 0, 3), (0, ErrorCode.NONE, -1, -1), (0, ErrorCode.NONE, -1, -1),
        (1, ErrorCode.NONE, 0, 0), (0, ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1),
        (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    ]
