"""APIs only brokers and controllers call are refused to clients.

WriteTxnMarkers (27) writes COMMIT/ABORT markers into data partitions: a client that sends one can
abort another producer's transaction between its send and its commit, and the committed record
then never reaches read_committed readers. Kafka authorizes the request as CLUSTER_ACTION on the
cluster and answers a client without that permission CLUSTER_AUTHORIZATION_FAILED for every
partition, keeping the connection. This broker is a single node with no peers, whose transaction
coordinator writes its markers in-process: without an authorizer every caller is refused, and with
one only a principal granted CLUSTER_ACTION (an operator aborting a hanging transaction,
``test_abort_hanging_transaction.py``) is served. The API stays
advertised, as Kafka advertises it on a broker listener; what Kafka serves only on controller
listeners (its ``"listeners"`` in the message definitions lack ``"broker"``) is not advertised.
"""

from __future__ import annotations

import uuid

import pytest

from reference_broker.testing import BrokerFactory
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    ApiVersionsRequest,
    DescribeProducersRequest,
    MetadataRequest,
    WriteTxnMarkersRequest,
)
from tests.reference_broker.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.reference_broker.read_committed_helpers import read_committed_values  # noqa: E402

WRITE_TXN_MARKERS = WriteTxnMarkersRequest.API_KEY
#: Keys whose request definitions list no "broker" listener (controller or ZooKeeper-era only):
#: LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, Vote, BeginQuorumEpoch,
#: EndQuorumEpoch, AlterPartition, Envelope, FetchSnapshot, BrokerRegistration, BrokerHeartbeat,
#: AllocateProducerIds, ControllerRegistration, AssignReplicasToDirs, UpdateRaftVoter.
NOT_ON_BROKER_LISTENERS = frozenset({4, 5, 6, 7, 52, 53, 54, 56, 58, 59, 62, 63, 67, 70, 73, 82})


def abort_marker(topic: str, producer_id: int, producer_epoch: int) -> WriteTxnMarkersRequest:
    marker = WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_result=False,
        coordinator_epoch=0,
        topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])],
    )
    return WriteTxnMarkersRequest(markers=[marker])


def open_transaction_of(wire: WireClient, topic: str) -> tuple[int, int]:
    """The producer id and epoch of the transaction open on partition 0 of ``topic``."""
    request = DescribeProducersRequest(
        topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]
    )
    [producer] = wire.request(request, 0).topics[0].partitions[0].active_producers
    assert producer.current_txn_start_offset >= 0, "no transaction is open"
    return producer.producer_id, producer.producer_epoch


def test_an_injected_abort_marker_is_refused_and_the_commit_stays_visible(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tid-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed-value")
    assert producer.flush(30) == 0

    with WireClient(broker.bootstrap) as wire:
        producer_id, epoch = open_transaction_of(wire, topic)
        answers = [wire.request(abort_marker(topic, producer_id, epoch), 1)]
        # The connection stays up and keeps serving.
        assert wire.request(MetadataRequest(topics=None), 12).brokers
    producer.commit_transaction(30)

    assert read_committed_values(broker.bootstrap, topic) == [b"committed-value"]
    for answer in answers:
        [result] = answer.markers
        assert result.producer_id == producer_id
        assert [(t.name, p.partition_index, p.error_code) for t in result.topics for p in t.partitions] == [
            (topic, 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        ]


@pytest.fixture(params=["reference_broker", pytest.param("apache_kafka", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest, broker_factory: BrokerFactory) -> str:
    if request.param == "reference_broker":
        return broker_factory().bootstrap
    return str(request.getfixturevalue("apache_kafka").bootstrap)


def test_api_versions_lists_what_a_kafka_broker_listener_lists(bootstrap: str) -> None:
    with WireClient(bootstrap) as wire:
        request = ApiVersionsRequest(client_software_name="wire-test", client_software_version="1")
        answer = wire.request(request, 3)
    assert answer.error_code == 0
    advertised = {k.api_key for k in answer.api_keys}
    assert WRITE_TXN_MARKERS in advertised
    assert not advertised & NOT_ON_BROKER_LISTENERS
