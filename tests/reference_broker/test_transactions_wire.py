"""Transaction APIs on the wire: the versions advertised, Kafka's per-version error answers
(PRODUCER_FENCED vs INVALID_PRODUCER_EPOCH), the batched verify-only AddPartitionsToTxn,
transactional produce outside the transaction refused, Fetch/ListOffsets under read_committed,
ListTransactions/DescribeTransactions/DescribeProducers and WriteTxnMarkers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from reference_broker.testing import BrokerProcess
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    ApiVersionsRequest,
    CreateTopicsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    ListTransactionsRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from sdk.records import ControlType, RecordBatchBuilder, iter_batches
from tests.reference_broker.wire import WireClient, fetch_request

CONFIG = {
    "num.partitions": 2,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "transaction.max.timeout.ms": 60_000,
}
ADVERTISED = {
    22: (0, 6),
    24: (0, 5),
    25: (0, 4),
    26: (0, 5),
    27: (1, 1),
    28: (0, 5),
    61: (0, 0),
    65: (0, 0),
    66: (0, 2),
}
Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def txn_broker() -> Iterator[BrokerProcess]:
    with BrokerProcess(config=CONFIG) as proc:
        yield proc


@pytest.fixture
def wire(txn_broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(txn_broker.bootstrap) as client:
        yield client


def create_topic(wire: WireClient, name: str, partitions: int = 2) -> None:
    topic = CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)
    response = wire.request(CreateTopicsRequest(topics=[topic], timeout_ms=5000), 5)
    assert response.topics[0].error_code == 0


def init(wire: WireClient, transactional_id: str, version: int = 4) -> tuple[int, int]:
    response = wire.request(
        InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=30_000), version
    )
    assert response.error_code == 0
    return response.producer_id, response.producer_epoch


def add_partitions(
    wire: WireClient, tid: str, pid: int, epoch: int, topic: str, parts: list[int], version: int = 3
):
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[Topic(name=topic, partitions=parts)],
    )
    response = wire.request(request, version)
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def produce(
    wire: WireClient, topic: str, partition: int, pid: int, epoch: int, seq: int, value: bytes
) -> int:
    builder = RecordBatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )
    builder.append(0, None, value)
    request = ProduceRequest(
        transactional_id="x",
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=partition, records=builder.build())
                ],
            )
        ],
    )
    return wire.request(request, 9).responses[0].partition_responses[0].error_code


def end(wire: WireClient, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    request = EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
    return wire.request(request, version).error_code


def test_advertised_versions_and_find_coordinator(wire: WireClient, txn_broker: BrokerProcess) -> None:
    response = wire.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    advertised = {a.api_key: (a.min_version, a.max_version) for a in response.api_keys}
    assert {k: advertised.get(k) for k in ADVERTISED} == ADVERTISED
    port = int(txn_broker.bootstrap.rpartition(":")[2])
    for version in (1, 2, 3):
        found = wire.request(FindCoordinatorRequest(key="any-tid", key_type=1), version)
        assert (found.error_code, found.port) == (0, port)
    batched = wire.request(FindCoordinatorRequest(key_type=1, coordinator_keys=["a", "b"]), 4)
    assert [(c.key, c.error_code) for c in batched.coordinators] == [("a", 0), ("b", 0)]


def test_fenced_errors_follow_the_request_version(wire: WireClient) -> None:
    topic, tid = unique("fenced"), unique("tid")
    create_topic(wire, topic)
    pid, epoch = init(wire, tid)
    assert init(wire, tid) == (pid, epoch + 1)
    assert add_partitions(wire, tid, pid, epoch, topic, [0], version=1) == {
        (topic, 0): E.INVALID_PRODUCER_EPOCH
    }
    assert add_partitions(wire, tid, pid, epoch, topic, [0], version=2) == {(topic, 0): E.PRODUCER_FENCED}
    assert end(wire, tid, pid, epoch, True, version=1) == E.INVALID_PRODUCER_EPOCH
    assert end(wire, tid, pid, epoch, True, version=2) == E.PRODUCER_FENCED
    offsets = AddOffsetsToTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id="g"
    )
    assert wire.request(offsets, 1).error_code == E.INVALID_PRODUCER_EPOCH
    assert wire.request(offsets, 3).error_code == E.PRODUCER_FENCED
    stale = InitProducerIdRequest(
        transactional_id=tid,
        transaction_timeout_ms=30_000,
        producer_id=pid,
        producer_epoch=epoch - 1 if epoch else 7,
    )
    assert wire.request(stale, 3).error_code == E.INVALID_PRODUCER_EPOCH
    assert wire.request(stale, 4).error_code == E.PRODUCER_FENCED
    too_long = InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_001)
    assert wire.request(too_long, 4).error_code == E.INVALID_TRANSACTION_TIMEOUT
    # KIP-939 is on in the test brokers (refused with it off: test_transactions_v2.py).
    two_phase = InitProducerIdRequest(
        transactional_id=unique("2pc"), transaction_timeout_ms=1, enable2_pc=True
    )
    accepted = wire.request(two_phase, 6)
    ongoing = (accepted.ongoing_txn_producer_id, accepted.ongoing_txn_producer_epoch)
    assert (accepted.error_code, ongoing) == (0, (-1, -1))
    unknown = add_partitions(wire, unique("nobody"), pid, epoch, topic, [0])
    assert unknown == {(topic, 0): E.INVALID_PRODUCER_ID_MAPPING}
    missing_topic = unique("missing")
    assert add_partitions(wire, tid, pid, epoch + 1, missing_topic, [0]) == {
        (missing_topic, 0): E.UNKNOWN_TOPIC_OR_PARTITION
    }
    missing = add_partitions(wire, tid, pid, epoch + 1, topic, [0, 9])
    assert missing == {(topic, 0): E.OPERATION_NOT_ATTEMPTED, (topic, 9): E.UNKNOWN_TOPIC_OR_PARTITION}


def test_transaction_on_the_wire_with_read_committed_fetch(wire: WireClient) -> None:
    topic, tid = unique("wire-txn"), unique("tid")
    create_topic(wire, topic)
    pid, epoch = init(wire, tid)
    assert produce(wire, topic, 0, pid, epoch, 0, b"early") == E.INVALID_TXN_STATE  # no AddPartitions
    assert add_partitions(wire, tid, pid, epoch, topic, [0]) == {(topic, 0): 0}
    assert produce(wire, topic, 1, pid, epoch, 0, b"elsewhere") == E.INVALID_TXN_STATE  # not added
    assert produce(wire, topic, 0, pid, epoch, 0, b"aborted") == 0
    # v4 batched verify-only: partition 0 is in the transaction, partition 1 is not.
    verify = AddPartitionsToTxnRequest(
        transactions=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                transactional_id=tid,
                producer_id=pid,
                producer_epoch=epoch,
                verify_only=True,
                topics=[Topic(name=topic, partitions=[0, 1])],
            )
        ]
    )
    answer = wire.request(verify, 4)
    assert answer.error_code == 0
    result = answer.results_by_transaction[0]
    assert [
        (p.partition_index, p.partition_error_code)
        for t in result.topic_results
        for p in t.results_by_partition
    ] == [(0, 0), (1, E.INVALID_TXN_STATE)]
    # The last stable offset stays before the open transaction, for Fetch and ListOffsets.
    fetched = wire.request(fetch_request(topic, 0, isolation_level=1), 11).responses[0].partitions[0]
    assert (fetched.high_watermark, fetched.last_stable_offset) == (1, 0)
    listed = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)],
            )
        ],
    )
    assert wire.request(listed, 5).topics[0].partitions[0].offset == 0
    described = wire.request(
        DescribeTransactionsRequest(transactional_ids=[tid, unique("none")]), 0
    ).transaction_states
    assert (
        described[0].transaction_state,
        described[0].producer_id,
        [(t.topic, t.partitions) for t in described[0].topics],
    ) == ("Ongoing", pid, [(topic, [0])])
    assert described[1].error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    producers = wire.request(
        DescribeProducersRequest(
            topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]
        ),
        0,
    )
    state = producers.topics[0].partitions[0].active_producers
    assert [(s.producer_id, s.producer_epoch, s.current_txn_start_offset) for s in state] == [(pid, epoch, 0)]
    listing = wire.request(
        ListTransactionsRequest(state_filters=["Ongoing", "Bogus"], producer_id_filters=[pid]), 1
    )
    assert [(t.transactional_id, t.transaction_state) for t in listing.transaction_states] == [
        (tid, "Ongoing")
    ]
    assert listing.unknown_state_filters == ["Bogus"]
    pattern = wire.request(ListTransactionsRequest(transactional_id_pattern=tid[:8] + ".*"), 2)
    assert tid in {t.transactional_id for t in pattern.transaction_states}

    assert end(wire, tid, pid, epoch, commit=False) == 0
    fetched = wire.request(fetch_request(topic, 0, isolation_level=1), 11).responses[0].partitions[0]
    assert (fetched.high_watermark, fetched.last_stable_offset) == (2, 2)
    assert [(a.producer_id, a.first_offset) for a in fetched.aborted_transactions] == [(pid, 0)]
    assert wire.request(listed, 5).topics[0].partitions[0].offset == 2
    # A late batch of the ended transaction cannot start a new one.
    assert produce(wire, topic, 0, pid, epoch, 1, b"late") == E.INVALID_TXN_STATE
    assert end(wire, tid, pid, epoch, commit=True) == E.INVALID_TXN_STATE


def txn_offset_commit_request(
    tid: str, group: str, pid: int, epoch: int, topic: str, offset: int
) -> TxnOffsetCommitRequest:
    """TxnOffsetCommit of ``offset`` for partition 0 of ``topic``, outside any group generation."""
    return TxnOffsetCommitRequest(
        transactional_id=tid,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=-1,
        member_id="",
        topics=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset
                    )
                ],
            )
        ],
    )


def test_txn_offset_commit_on_the_wire(wire: WireClient) -> None:
    tid, group, topic = unique("tid"), unique("group"), unique("offsets")
    create_topic(wire, topic)
    pid, epoch = init(wire, tid)
    commit = txn_offset_commit_request(tid, group, pid, epoch, topic, 5)
    first = wire.request(commit, 3)
    assert first.topics[0].partitions[0].error_code == E.INVALID_TXN_STATE  # AddOffsetsToTxn first
    offsets = AddOffsetsToTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
    )
    assert wire.request(offsets, 3).error_code == 0
    for version in (0, 3, 5):
        assert wire.request(commit, version).topics[0].partitions[0].error_code == 0
    commit.generation_id = 4
    assert wire.request(commit, 3).topics[0].partitions[0].error_code == E.ILLEGAL_GENERATION
    assert end(wire, tid, pid, epoch, commit=True) == 0


def test_write_txn_markers_api(wire: WireClient) -> None:
    """Served without an authorizer, as Kafka serves it: a marker for a producer with no open
    transaction is written, a partition the topic lacks is refused on its own
    (``test_inter_broker_apis.py`` compares more cases with Apache Kafka)."""
    topic = unique("markers")
    create_topic(wire, topic, 1)
    Marker = WriteTxnMarkersRequest.WritableTxnMarker
    request = WriteTxnMarkersRequest(
        markers=[
            Marker(
                producer_id=123456,
                producer_epoch=3,
                transaction_result=True,
                coordinator_epoch=2,
                topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic, partition_indexes=[0, 7])],
            )
        ]
    )
    for version in (1,):  # Kafka 4.1's range
        response = wire.request(request, version)
        codes = {(p.partition_index, p.error_code) for t in response.markers[0].topics for p in t.partitions}
        assert codes == {(0, E.NONE), (7, E.UNKNOWN_TOPIC_OR_PARTITION)}
    [batch] = iter_batches(wire.fetch_all(topic, 0))
    assert (batch.base_offset, batch.producer_id, batch.producer_epoch) == (0, 123456, 3)
    assert batch.is_control and batch.is_transactional
    marker = batch.control_record()
    assert (marker.type, marker.coordinator_epoch) == (ControlType.COMMIT, 2)


def test_bad_input_gets_kafkas_errors(wire: WireClient) -> None:
    bad_regex = wire.request(ListTransactionsRequest(transactional_id_pattern="(unclosed"), 2)
    assert bad_regex.error_code == E.INVALID_REGULAR_EXPRESSION
    empty = wire.request(InitProducerIdRequest(transactional_id="", transaction_timeout_ms=1000), 4)
    assert empty.error_code == E.INVALID_REQUEST
    assert end(wire, "", 1, 0, commit=True) == E.INVALID_REQUEST
    no_group = AddOffsetsToTxnRequest(transactional_id="t", producer_id=1, producer_epoch=0, group_id="")
    assert wire.request(no_group, 3).error_code == E.INVALID_GROUP_ID
    unknown = end(wire, unique("never-initialised"), 1, 0, commit=True)
    assert unknown == E.INVALID_PRODUCER_ID_MAPPING
    # The broker is still serving.
    assert wire.request(ListTransactionsRequest(), 0).error_code == 0
