"""Topic and broker configs in a replicated cluster go through the controller and the metadata log.

A change sent to any one node (CreateTopics with configs, AlterConfigs, IncrementalAlterConfigs)
is decided by the active controller and written as ConfigRecords; every node applies them to its
replicas and describes them, a node that was down or restarted gets them back from the metadata
log, a new leader after a crash acts on them, and a refused change (bad
value, unknown topic, validate_only) changes nothing on any node. Dynamic broker configs (the
cluster-wide default "" and one broker's own) reach the brokers they name through any node.

Requests go over a plain socket to the chosen node, since Kafka's admin clients send a topic's
config calls to whichever broker they like.
"""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from reference_broker.testing import ClusterProcess, wait_until
from sdk.protocol.codec import decode_response, encode_request
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AlterConfigsRequest,
    CreateTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
    Message,
)

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = 2
SET, DELETE = 0, 1
DYNAMIC_TOPIC_CONFIG = 1
VERSIONS = {
    CreateTopicsRequest.API_KEY: 7,
    AlterConfigsRequest.API_KEY: 2,
    IncrementalAlterConfigsRequest.API_KEY: 1,
    DescribeConfigsRequest.API_KEY: 4,
}
CLUSTER_CONFIG = {
    "default.replication.factor": 3,
    # A killed node is fenced, and leaves the ISR, within seconds.
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
}


def send(bootstrap: str, request: Message) -> Any:
    """``request``'s answer from the node at ``bootstrap`` itself."""
    api_key = request.API_KEY
    assert api_key is not None
    version = VERSIONS[api_key]
    payload = encode_request(request, version, 1, "topic-configs-test")
    host, _, port = bootstrap.rpartition(":")
    frame = struct.Struct(">i")
    with socket.create_connection((host, int(port)), timeout=35) as sock:
        sock.sendall(frame.pack(len(payload)) + payload)
        size = frame.unpack(sock.recv(4, socket.MSG_WAITALL))[0]
        body = sock.recv(size, socket.MSG_WAITALL)
    return decode_response(api_key, version, body)[1]


def create_topic(bootstrap: str, topic: str, configs: dict[str, str] | None = None) -> None:
    Topic = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest(
        topics=[
            Topic(
                name=topic,
                num_partitions=1,
                replication_factor=3,
                configs=[Topic.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
            )
        ],
        timeout_ms=30_000,
    )
    (result,) = send(bootstrap, request).topics
    assert result.error_code == ErrorCode.NONE, result


def incremental_alter(
    bootstrap: str, topic: str, ops: Sequence[tuple[str, int, str | None]], validate_only: bool = False
) -> tuple[int, str | None]:
    Resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    request = IncrementalAlterConfigsRequest(
        resources=[
            Resource(
                resource_type=TOPIC,
                resource_name=topic,
                configs=[
                    Resource.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops
                ],
            )
        ],
        validate_only=validate_only,
    )
    (result,) = send(bootstrap, request).responses
    return result.error_code, result.error_message


def alter(bootstrap: str, topic: str, configs: dict[str, str]) -> tuple[int, str | None]:
    Resource = AlterConfigsRequest.AlterConfigsResource
    request = AlterConfigsRequest(
        resources=[
            Resource(
                resource_type=TOPIC,
                resource_name=topic,
                configs=[Resource.AlterableConfig(name=k, value=v) for k, v in configs.items()],
            )
        ]
    )
    (result,) = send(bootstrap, request).responses
    return result.error_code, result.error_message


def described(bootstrap: str, topic: str) -> dict[str, tuple[str | None, int]]:
    """name -> (value, config_source) of every config of ``topic`` as that node describes it."""
    request = DescribeConfigsRequest(
        resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=TOPIC, resource_name=topic, configuration_keys=None
        )]
    )
    (result,) = send(bootstrap, request).results
    assert result.error_code == ErrorCode.NONE, result
    return {c.name: (c.value, c.config_source) for c in result.configs}


def overrides_on(cluster: ClusterProcess, node_id: int, topic: str) -> dict[str, str | None]:
    """The topic's dynamic overrides node ``node_id`` describes."""
    configs = described(cluster.node(node_id).bootstrap, topic)
    return {k: v for k, (v, source) in configs.items() if source == DYNAMIC_TOPIC_CONFIG}


def wait_overrides_everywhere(cluster: ClusterProcess, topic: str, expected: dict[str, str]) -> None:
    wait_until(
        lambda: all(overrides_on(cluster, n, topic) == expected for n in (1, 2, 3)),
        f"every node describes {topic}'s overrides as {expected}",
        timeout=30,
    )


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterProcess]:
    with ClusterProcess(3, CLUSTER_CONFIG, proxy=False) as c:
        yield c


@pytest.mark.parametrize("via", [1, 2, 3])
def test_a_bad_change_is_refused_by_any_node_and_changes_nothing(cluster: ClusterProcess, via: int) -> None:
    topic = f"refused-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap.split(",")[0], topic, {"retention.ms": "100000"})
    wait_overrides_everywhere(cluster, topic, {"retention.ms": "100000"})
    node = cluster.node(via).bootstrap

    code, message = incremental_alter(
        node, topic, [("retention.ms", SET, "200000"), ("segment.bytes", SET, "not-a-number")]
    )
    assert code == ErrorCode.INVALID_CONFIG, message
    assert message is not None and "segment.bytes" in message
    code, message = alter(node, topic, {"min.insync.replicas": "0"})
    assert code == ErrorCode.INVALID_CONFIG, message
    code, message = incremental_alter(node, topic, [("retention.ms", SET, "300000")], validate_only=True)
    assert code == ErrorCode.NONE, message
    code, message = incremental_alter(node, f"missing-{topic}", [("retention.ms", SET, "1")])
    assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message

    # A later accepted change reaches every node; none of the refused or validated ones did.
    assert incremental_alter(node, topic, [("max.message.bytes", SET, "65536")]) == (ErrorCode.NONE, None)
    wait_overrides_everywhere(cluster, topic, {"retention.ms": "100000", "max.message.bytes": "65536"})


def test_topic_configs_come_back_from_the_metadata_log_after_every_node_restarts() -> None:
    topic = f"restarted-{uuid.uuid4().hex[:8]}"
    with ClusterProcess(3, CLUSTER_CONFIG, proxy=False) as cluster:
        create_topic(cluster.node(1).bootstrap, topic, {"cleanup.policy": "compact"})
        assert incremental_alter(cluster.node(2).bootstrap, topic, [("retention.ms", SET, "12345")]) == (
            ErrorCode.NONE,
            None,
        )
        wait_overrides_everywhere(cluster, topic, {"cleanup.policy": "compact", "retention.ms": "12345"})

        # Changed while node 3 is down: AlterConfigs replaces the whole set (cleanup.policy goes).
        cluster.stop(3)
        replaced = {"retention.ms": "23456", "min.insync.replicas": "2"}
        assert alter(cluster.node(1).bootstrap, topic, replaced) == (ErrorCode.NONE, None)
        for n in (1, 2):
            cluster.stop(n)
        for n in (1, 2, 3):
            cluster.start_node(n)
        cluster.wait_until_registered()

        wait_overrides_everywhere(cluster, topic, replaced)
        for n in (1, 2, 3):
            assert described(cluster.node(n).bootstrap, topic)["cleanup.policy"][0] == "delete"


def produce_once(bootstrap: str, topic: str) -> Any:
    """One acks=all record with no retries: its delivery error (None when stored)."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "retries": 0,
            "enable.idempotence": False,
            "message.timeout.ms": 10000,
        }
    )
    outcome: list[Any] = []
    producer.produce(topic, b"probe", partition=0, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(15)
    assert outcome, "no delivery report"
    return outcome[0]


def test_the_new_leader_after_a_crash_acts_on_configs_altered_through_the_old_one() -> None:
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    with ClusterProcess(3, CLUSTER_CONFIG, proxy=False) as cluster:
        create_topic(cluster.node(1).bootstrap, topic)
        old_leader = cluster.leader_of(topic, 0)
        assert produce_once(cluster.bootstrap, topic) is None
        ops = [("min.insync.replicas", SET, "3"), ("retention.ms", SET, "7777")]
        assert incremental_alter(cluster.node(old_leader).bootstrap, topic, ops) == (ErrorCode.NONE, None)

        cluster.kill(old_leader)
        others = [n for n in (1, 2, 3) if n != old_leader]

        def new_leader() -> int | None:
            part = cluster.partition(topic, 0, via=others[0])
            if part is None or part.leader_id in (-1, old_leader) or old_leader in part.isr_nodes:
                return None
            return int(part.leader_id)

        leader = wait_until(new_leader, f"a new leader of {topic}-0 without node {old_leader} in the ISR")
        survivors = ",".join(cluster.node(n).bootstrap for n in others)
        error = produce_once(survivors, topic)
        assert error is not None, "acks=all was stored by 2 replicas although min.insync.replicas=3"
        assert error.code() == confluent_kafka.KafkaError.NOT_ENOUGH_REPLICAS, error
        assert described(cluster.node(leader).bootstrap, topic)["retention.ms"][0] == "7777"

        # The new controller takes changes too; the leader acts on the lower minimum.
        ops = [("min.insync.replicas", SET, "2")]
        assert incremental_alter(cluster.node(leader).bootstrap, topic, ops) == (ErrorCode.NONE, None)
        wait_until(lambda: produce_once(survivors, topic) is None, "acks=all is stored by the 2 replicas")


BROKER = 4


def alter_broker(bootstrap: str, name: str, key: str, value: str | None) -> tuple[int, str | None]:
    Resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    op = SET if value is not None else DELETE
    request = IncrementalAlterConfigsRequest(
        resources=[
            Resource(
                resource_type=BROKER,
                resource_name=name,
                configs=[Resource.AlterableConfig(name=key, config_operation=op, value=value)],
            )
        ]
    )
    (result,) = send(bootstrap, request).responses
    return result.error_code, result.error_message


def broker_config_on(cluster: ClusterProcess, node_id: int, key: str) -> tuple[str | None, int]:
    """(value, config_source) of ``key`` as node ``node_id`` describes its own broker configs."""
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=BROKER, resource_name=str(node_id), configuration_keys=[key]
            )
        ]
    )
    (result,) = send(cluster.node(node_id).bootstrap, request).results
    assert result.error_code == ErrorCode.NONE, result
    (entry,) = result.configs
    return entry.value, entry.config_source


def test_broker_configs_altered_through_one_node_reach_the_brokers_they_name(cluster: ClusterProcess) -> None:
    from reference_broker.config import ConfigSource

    topic = f"broker-default-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.node(1).bootstrap, topic)
    via = cluster.node(1).bootstrap
    assert alter_broker(via, "", "log.retention.ms", "4321000") == (ErrorCode.NONE, None)
    assert alter_broker(via, "2", "log.cleaner.threads", "2") == (ErrorCode.NONE, None)
    code, message = alter_broker(cluster.node(3).bootstrap, "", "log.retention.ms", "soon")
    assert code == ErrorCode.INVALID_REQUEST, message
    try:
        cluster_default = ("4321000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
        wait_until(
            lambda: all(
                broker_config_on(cluster, n, "log.retention.ms") == cluster_default for n in (1, 2, 3)
            ),
            "every broker takes the cluster-wide log.retention.ms",
        )
        # The new log default is in effect for a topic without its own retention.ms.
        for n in (1, 2, 3):
            assert described(cluster.node(n).bootstrap, topic)["retention.ms"][0] == "4321000"
        own = ("2", ConfigSource.DYNAMIC_BROKER_CONFIG)
        wait_until(
            lambda: broker_config_on(cluster, 2, "log.cleaner.threads") == own, "broker 2's own config"
        )
        assert broker_config_on(cluster, 1, "log.cleaner.threads")[1] != ConfigSource.DYNAMIC_BROKER_CONFIG
    finally:
        alter_broker(via, "", "log.retention.ms", None)
        alter_broker(via, "2", "log.cleaner.threads", None)
