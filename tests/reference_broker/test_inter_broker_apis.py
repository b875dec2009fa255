"""WriteTxnMarkers (27), the transaction coordinator's request to a partition leader, as Apache
Kafka serves it, and what Kafka serves only on controller listeners.

Kafka authorizes WriteTxnMarkers as CLUSTER_ACTION on the cluster: without an authorizer anyone may
send it (a coordinator on another node, an admin client's KIP-664 abort), with one a principal
without that permission gets CLUSTER_AUTHORIZATION_FAILED for every partition and the connection
stays up. Each partition then answers on its own: a marker for a producer with no open transaction
there is written all the same, an older producer epoch is INVALID_PRODUCER_EPOCH, an older
coordinator epoch TRANSACTION_COORDINATOR_FENCED, a partition the broker does not have
UNKNOWN_TOPIC_OR_PARTITION. An abort marker sent into a producer's open transaction aborts its
records even though the producer's commit then succeeds: Kafka trusts whoever may send the API,
which is why an authorizer restricts it. The tests without an authorizer run on both brokers and
assert what Kafka answers. The API stays advertised, as on a Kafka broker listener; what Kafka
serves only on controller listeners (its ``"listeners"`` in the message definitions lack
``"broker"``) is not advertised.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from reference_broker.testing import BrokerFactory
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    ApiVersionsRequest,
    DescribeProducersRequest,
    MetadataRequest,
    WriteTxnMarkersRequest,
)
from sdk.records import ControlType, RecordBatch, iter_batches
from tests.reference_broker.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.reference_broker.read_committed_helpers import read_committed_values  # noqa: E402

WRITE_TXN_MARKERS = WriteTxnMarkersRequest.API_KEY
#: Keys whose request definitions list no "broker" listener (controller or ZooKeeper-era only):
#: LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, Vote, BeginQuorumEpoch,
#: EndQuorumEpoch, AlterPartition, Envelope, FetchSnapshot, BrokerRegistration, BrokerHeartbeat,
#: AllocateProducerIds, ControllerRegistration, AssignReplicasToDirs, UpdateRaftVoter.
NOT_ON_BROKER_LISTENERS = frozenset({4, 5, 6, 7, 52, 53, 54, 56, 58, 59, 62, 63, 67, 70, 73, 82})
#: One partition's answer to a WriteTxnMarkers: (producer id, topic, partition, error code).
Answer = tuple[int, str, int, int]


#: The authorizer on with anything allowed where no ACL names the resource; the test's ACL on the
#: cluster grants CLUSTER_ACTION to another principal, so the plaintext client (User:ANONYMOUS) has
#: no permission on the cluster.
AUTHORIZER_WITHOUT_CLUSTER_ACTION = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


def marker(
    topic: str,
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool = False,
    coordinator_epoch: int = 0,
    partitions: tuple[int, ...] = (0,),
) -> WriteTxnMarkersRequest.WritableTxnMarker:
    return WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_result=commit,
        coordinator_epoch=coordinator_epoch,
        topics=[
            WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic, partition_indexes=list(partitions))
        ],
    )


def write_markers(wire: WireClient, *markers: WriteTxnMarkersRequest.WritableTxnMarker) -> set[Answer]:
    """(producer id, topic, partition, error code) of each partition's answer; Kafka answers
    them in no set order."""
    response = wire.request(WriteTxnMarkersRequest(markers=list(markers)), 1)
    return {
        (m.producer_id, t.name, p.partition_index, p.error_code)
        for m in response.markers
        for t in m.topics
        for p in t.partitions
    }


def markers_in_log(wire: WireClient, topic: str) -> list[tuple[int, int, int, ControlType | int, int]]:
    """(offset, producer id, producer epoch, control type, coordinator epoch) of each control batch
    of partition 0."""
    return [
        (b.base_offset, b.producer_id, b.producer_epoch, *_type_and_epoch(b))
        for b in iter_batches(wire.fetch_all(topic, 0))
        if b.is_control
    ]


def _type_and_epoch(batch: RecordBatch) -> tuple[ControlType | int, int]:
    record = batch.control_record()
    return record.type, record.coordinator_epoch


def producers_of(wire: WireClient, topic: str) -> list[tuple[int, int, int, int]]:
    """(producer id, epoch, coordinator epoch, open transaction's first offset or -1) of every
    producer DescribeProducers lists on partition 0."""
    request = DescribeProducersRequest(
        topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]
    )
    answer = wire.request(request, 0).topics[0].partitions[0]
    assert answer.error_code == 0
    return sorted(
        (p.producer_id, p.producer_epoch, p.coordinator_epoch, p.current_txn_start_offset)
        for p in answer.active_producers
    )


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    wait_for(lambda: topic in admin.list_topics(topic, timeout=10).topics, f"{topic} in the metadata")


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture(params=["reference_broker", pytest.param("apache_kafka", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest, broker_factory: BrokerFactory) -> str:
    if request.param == "reference_broker":
        return broker_factory().bootstrap
    return str(request.getfixturevalue("apache_kafka").bootstrap)


def test_markers_without_an_authorizer_are_written_and_checked_per_partition(bootstrap: str) -> None:
    topic = f"markers-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    pid = 123456
    with WireClient(bootstrap, timeout=30) as wire:
        assert write_markers(wire) == set()
        # No transaction of the producer is open on the partition: the marker is written anyway;
        # the partition the topic does not have is refused on its own.
        assert write_markers(
            wire, marker(topic, pid, 3, commit=True, coordinator_epoch=5, partitions=(0, 7))
        ) == {(pid, topic, 0, ErrorCode.NONE), (pid, topic, 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
        assert producers_of(wire, topic) == [(pid, 3, 5, -1)]
        assert write_markers(wire, marker(topic, pid, 2, coordinator_epoch=5)) == {
            (pid, topic, 0, ErrorCode.INVALID_PRODUCER_EPOCH)
        }
        assert write_markers(wire, marker(topic, pid, 3, coordinator_epoch=4)) == {
            (pid, topic, 0, ErrorCode.TRANSACTION_COORDINATOR_FENCED)
        }
        # A newer producer epoch is taken, and becomes the producer's.
        assert write_markers(wire, marker(topic, pid, 4, coordinator_epoch=5)) == {
            (pid, topic, 0, ErrorCode.NONE)
        }
        assert producers_of(wire, topic) == [(pid, 4, 5, -1)]
        missing = f"missing-{topic}"
        assert write_markers(wire, marker(missing, 9, 0, partitions=(0, 1))) == {
            (9, missing, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            (9, missing, 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        }
        # Markers of two producers in one request, one of them stale: each answered on its own.
        assert write_markers(wire, marker(topic, 777, 0, commit=True), marker(topic, pid, 1)) == {
            (777, topic, 0, ErrorCode.NONE),
            (pid, topic, 0, ErrorCode.INVALID_PRODUCER_EPOCH),
        }
        # Only what was answered NONE is in the log.
        assert markers_in_log(wire, topic) == [
            (0, pid, 3, ControlType.COMMIT, 5),
            (1, pid, 4, ControlType.ABORT, 5),
            (2, 777, 0, ControlType.COMMIT, 0),
        ]


def test_an_abort_marker_sent_into_an_open_transaction_aborts_it(bootstrap: str) -> None:
    """Without an authorizer a client's marker is taken as the coordinator's: the producer's commit
    then succeeds, but its record stays aborted for read_committed readers."""
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tid-{topic}", "log_level": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted-by-the-marker", partition=0)
    assert producer.flush(30) == 0

    with WireClient(bootstrap, timeout=30) as wire:
        [(producer_id, epoch, coordinator_epoch, first_offset)] = producers_of(wire, topic)
        assert first_offset == 0
        injected = marker(topic, producer_id, epoch, coordinator_epoch=max(coordinator_epoch, 0))
        assert write_markers(wire, injected) == {(producer_id, topic, 0, ErrorCode.NONE)}
        assert producers_of(wire, topic)[0][3] == -1
    producer.commit_transaction(30)
    plain = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    plain.produce(topic, b"after", partition=0)
    assert plain.flush(30) == 0

    assert read_committed_values(bootstrap, topic) == [b"after"]


def test_with_an_authorizer_a_principal_without_cluster_action_is_refused(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(AUTHORIZER_WITHOUT_CLUSTER_ACTION)
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    only_brokers = AclBinding(
        ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:broker", "*",
        AclOperation.CLUSTER_ACTION, AclPermissionType.ALLOW,
    )  # fmt: skip
    [created] = admin.create_acls([only_brokers]).values()
    created.result(30)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"tid-{topic}", "log_level": 0}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed-value", partition=0)
    assert producer.flush(30) == 0

    with WireClient(broker.bootstrap) as wire:
        [(producer_id, epoch, _, _)] = producers_of(wire, topic)
        refused = write_markers(
            wire, marker(topic, producer_id, epoch, partitions=(0, 3)), marker(f"other-{topic}", 5, 0)
        )
        # The connection stays up and keeps serving.
        assert wire.request(MetadataRequest(topics=None), 12).brokers
    producer.commit_transaction(30)

    assert refused == {
        (producer_id, topic, 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
        (producer_id, topic, 3, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
        (5, f"other-{topic}", 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    }
    assert read_committed_values(broker.bootstrap, topic) == [b"committed-value"]


def test_api_versions_lists_what_a_kafka_broker_listener_lists(bootstrap: str) -> None:
    with WireClient(bootstrap) as wire:
        request = ApiVersionsRequest(client_software_name="wire-test", client_software_version="1")
        answer = wire.request(request, 3)
    assert answer.error_code == 0
    advertised = {k.api_key for k in answer.api_keys}
    assert WRITE_TXN_MARKERS in advertised
    assert not advertised & NOT_ON_BROKER_LISTENERS
