"""Admin operations on the replicated cluster, through any node, as Kafka's clients send them.

DeleteTopics sent to any node by confluent-kafka (v4, topics by name in ``topic_names``) or by the
SDK's admin is forwarded to the active controller; the topic then disappears from every node's
Metadata and its partition directories from every node's data dir, and a topic of the same name
created afterwards starts empty.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reference_broker.testing import ClusterProcess
from sdk.sync import AdminClient as SdkAdminClient

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer as CKConsumer  # noqa: E402
from confluent_kafka import KafkaError, KafkaException  # noqa: E402
from confluent_kafka import Producer as CKProducer  # noqa: E402
from confluent_kafka import TopicPartition as CKTopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.slow]

DEADLINE_S = 30.0


def until(condition: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline_s} s: {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterProcess]:
    config = {"default.replication.factor": 3, "log.segment.delete.delay.ms": 100}
    with ClusterProcess(3, config, proxy=False) as c:
        yield c


def topics_on(cluster: ClusterProcess, node_id: int) -> set[str]:
    node = cluster.node(node_id)
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    return set(admin.list_topics(timeout=10).topics)


def partition_dirs(cluster: ClusterProcess, node_id: int, topic: str) -> list[Path]:
    return sorted((cluster.data_dir / f"node-{node_id}").glob(f"{topic}-*"))


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = CKProducer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0


def end_offset(bootstrap: str, topic: str) -> int:
    """The partition's end offset. A node learns a new topic from the metadata log a moment after
    another has (as on Kafka), and librdkafka's watermark query does not retry an unknown
    partition, so that answer is asked again."""
    consumer = CKConsumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}"})
    end = time.monotonic() + DEADLINE_S
    try:
        while True:
            try:
                return int(consumer.get_watermark_offsets(CKTopicPartition(topic, 0), timeout=10)[1])
            except KafkaException as exc:
                code = exc.args[0].code()
                if code not in (KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART):
                    raise
                if time.monotonic() > end:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def delete_with_confluent_kafka(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=20)[topic].result(30)


def delete_with_sdk(bootstrap: str, topic: str) -> None:
    with SdkAdminClient(bootstrap_servers=bootstrap) as admin:
        assert admin.delete_topics([topic], timeout_ms=30_000) == {topic: None}


@pytest.mark.parametrize("delete", [delete_with_confluent_kafka, delete_with_sdk], ids=["confluent", "sdk"])
@pytest.mark.parametrize("via", [1, 2, 3])
def test_a_deleted_replicated_topic_leaves_every_node(
    cluster: ClusterProcess, delete: Callable[[str, str], None], via: int
) -> None:
    topic = f"deleted-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    until(lambda: all(topic in topics_on(cluster, n) for n in (1, 2, 3)), "the topic on every node")
    produce(cluster.bootstrap, topic, 10)
    assert end_offset(cluster.bootstrap, topic) == 10
    until(lambda: all(partition_dirs(cluster, n, topic) for n in (1, 2, 3)), "a replica on every node")

    delete(cluster.node(via).bootstrap, topic)

    until(lambda: all(topic not in topics_on(cluster, n) for n in (1, 2, 3)), "the topic gone everywhere")
    until(
        lambda: not any(partition_dirs(cluster, n, topic) for n in (1, 2, 3)),
        "the partition directories removed on every node",
    )

    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    until(lambda: all(topic in topics_on(cluster, n) for n in (1, 2, 3)), "the new topic on every node")
    assert end_offset(cluster.bootstrap, topic) == 0


def describe_topic_config_on(bootstrap: str, topic: str, key: str) -> str | None:
    """``key``'s value in a DescribeConfigs answered by the node at ``bootstrap`` itself (Kafka's
    clients send DescribeConfigs of a topic to any node, so they cannot pin one)."""
    from sdk.protocol.codec import decode_response, encode_request
    from sdk.protocol.messages import DescribeConfigsRequest

    version = 4
    request = DescribeConfigsRequest(
        resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=2, resource_name=topic, configuration_keys=[key]
        )]
    )
    payload = encode_request(request, version, 1, "cluster-admin-test")
    host, _, port = bootstrap.rpartition(":")
    frame = struct.Struct(">i")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame.pack(len(payload)) + payload)
        size = frame.unpack(sock.recv(4, socket.MSG_WAITALL))[0]
        body = sock.recv(size, socket.MSG_WAITALL)
    _, response = decode_response(DescribeConfigsRequest.API_KEY, version, body)
    (result,) = response.results  # type: ignore[attr-defined]
    assert result.error_code == 0, result
    return next((c.value for c in result.configs if c.name == key), None)


def test_a_topic_config_altered_through_one_node_is_in_effect_on_every_node(cluster: ClusterProcess) -> None:
    topic = f"configured-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    change = ConfigResource(
        "TOPIC", topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "12345", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([change]).values():
        future.result(30)
    until(
        lambda: all(
            describe_topic_config_on(cluster.node(n).bootstrap, topic, "retention.ms") == "12345"
            for n in (1, 2, 3)
        ),
        "retention.ms=12345 described by every node",
        deadline_s=10,
    )
