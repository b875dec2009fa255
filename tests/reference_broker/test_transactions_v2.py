"""Transactions v2 (KIP-890 part 2) on the wire: the transaction.version feature in ApiVersions and
what a broker below 2 answers, EndTxn v5's epoch bump (markers carry it, sequences restart at 0, a
retried EndTxn gets the same answer), the late produce of an ended transaction refused and never
visible to read_committed, implicit adds by Produce v12 and TxnOffsetCommit v5 (offsets visible only
on commit), the new producer id of an exhausted epoch, and a broker SIGKILLed between a v2
commit's prepare and its markers rolling it forward with the bumped epoch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reference_broker.coordinator.txn.service import KILL_AFTER_PREPARE_ENV
from reference_broker.coordinator.txn.state import MAX_EPOCH
from reference_broker.testing import BrokerFactory, BrokerProcess, run_in_process
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    ApiVersionsRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    OffsetFetchRequest,
    ProduceRequest,
)
from sdk.records import ControlType, RecordBatchBuilder, iter_batches
from tests.reference_broker.test_transactions_wire import (
    add_partitions,
    create_topic,
    txn_offset_commit_request,
    unique,
)
from tests.reference_broker.wire import WireClient, fetch_request

CONFIG = {
    "num.partitions": 2,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "transaction.max.timeout.ms": 60_000,
}


@pytest.fixture(scope="module")
def v2_broker() -> Iterator[BrokerProcess]:
    with BrokerProcess(config=CONFIG) as proc:
        yield proc


@pytest.fixture
def wire(v2_broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(v2_broker.bootstrap) as client:
        yield client


def init(wire: WireClient, tid: str, version: int = 5, **extra: object) -> tuple[int, int]:
    request = InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=30_000, **extra)
    response = wire.request(request, version)
    assert response.error_code == 0
    return response.producer_id, response.producer_epoch


def produce(
    wire: WireClient,
    tid: str | None,
    topic: str,
    partition: int,
    pid: int,
    epoch: int,
    seq: int,
    value: bytes,
    version: int = 12,
) -> int:
    builder = RecordBatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )
    builder.append(0, None, value)
    data = ProduceRequest.PartitionProduceData(index=partition, records=builder.build())
    request = ProduceRequest(
        transactional_id=tid,
        acks=-1,
        timeout_ms=5000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[data])],
    )
    return wire.request(request, version).responses[0].partition_responses[0].error_code


def end_v2(wire: WireClient, tid: str, pid: int, epoch: int, commit: bool) -> tuple[int, int, int]:
    request = EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
    response = wire.request(request, 5)
    return response.error_code, response.producer_id, response.producer_epoch


def committed_values(wire: WireClient, topic: str, partition: int) -> list[bytes]:
    """What a read_committed consumer gets from the partition."""
    fetched = wire.request(fetch_request(topic, partition, isolation_level=1), 11).responses[0].partitions[0]
    assert fetched.error_code == 0
    aborted = {a.producer_id: a.first_offset for a in fetched.aborted_transactions}
    values = []
    for batch in iter_batches(bytes(fetched.records or b"")):
        if batch.is_control:
            if batch.control_record().type == ControlType.ABORT:
                aborted.pop(batch.producer_id, None)
            continue
        if batch.producer_id in aborted and batch.base_offset >= aborted[batch.producer_id]:
            continue
        values.extend(r.value for r in batch)
    return values


def markers(wire: WireClient, topic: str, partition: int) -> list[tuple[int, int, int]]:
    return [
        (b.producer_id, b.producer_epoch, b.control_record().type)
        for b in iter_batches(wire.fetch_all(topic, partition))
        if b.is_control
    ]


def features(wire: WireClient, version: int) -> tuple[dict, dict, dict]:
    request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    response = wire.request(request, version)
    supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in response.finalized_features}
    apis = {a.api_key: a.max_version for a in response.api_keys}
    return supported, finalized, apis


def test_transaction_version_feature_and_the_versions_served(
    wire: WireClient, broker_factory: BrokerFactory
) -> None:
    supported, finalized, apis = features(wire, 4)
    assert supported["transaction.version"] == (0, 2) and finalized["transaction.version"] == (2, 2)
    assert (apis[0], apis[26], apis[28]) == (13, 5, 5)  # Produce, EndTxn, TxnOffsetCommit
    supported_v3, _, _ = features(wire, 3)
    assert supported_v3["transaction.version"] == (1, 2)  # KIP-1022: no level 0 before v4
    # A broker at transaction.version 1 answers what needs transactions v2 UNSUPPORTED_VERSION
    # (the versions stay advertised, as Kafka 4's), and without
    # transaction.two.phase.commit.enable offers no InitProducerId v6 (two-phase commit), as
    # Kafka 4.1 does.
    old = broker_factory({**CONFIG, "transaction.version": 1, "transaction.two.phase.commit.enable": False})
    with WireClient(old.bootstrap) as tv1:
        supported, finalized, apis = features(tv1, 3)
        assert finalized["transaction.version"] == (1, 1)
        assert (apis[0], apis[26], apis[28]) == (13, 5, 5)
        tid, topic, group = unique("tv1"), unique("tv1"), unique("group")
        create_topic(tv1, topic)
        pid, epoch = init(tv1, tid)
        assert produce(tv1, tid, topic, 0, pid, epoch, 0, b"v2") == E.UNSUPPORTED_VERSION
        assert offset_commit(tv1, 5, tid, group, pid, epoch, topic, 1) == E.UNSUPPORTED_VERSION
        assert end_v2(tv1, tid, pid, epoch, commit=True) == (E.UNSUPPORTED_VERSION, -1, -1)
        assert apis[22] == 5
        # Transactions v1 work unchanged there.
        assert add_partitions(tv1, tid, pid, epoch, topic, [0]) == {(topic, 0): 0}
        assert produce(tv1, tid, topic, 0, pid, epoch, 0, b"v1", version=11) == 0
        end = EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True)
        assert tv1.request(end, 4).error_code == 0
        assert committed_values(tv1, topic, 0) == [b"v1"]
    at_zero = broker_factory({**CONFIG, "transaction.version": 0})
    with WireClient(at_zero.bootstrap) as tv0:
        supported, finalized, _ = features(tv0, 4)
        assert supported["transaction.version"] == (0, 2) and "transaction.version" not in finalized


def test_commit_and_abort_bump_the_epoch_and_sequences_restart(wire: WireClient) -> None:
    topic, tid = unique("bump"), unique("tid")
    create_topic(wire, topic)
    pid, epoch = init(wire, tid)
    assert produce(wire, tid, topic, 0, pid, epoch, 0, b"a") == 0  # no AddPartitionsToTxn
    assert produce(wire, tid, topic, 1, pid, epoch, 0, b"b") == 0
    assert produce(wire, tid, topic, 0, pid, epoch, 1, b"c") == 0
    assert committed_values(wire, topic, 0) == []
    assert end_v2(wire, tid, pid, epoch, commit=True) == (0, pid, epoch + 1)
    assert markers(wire, topic, 0) == markers(wire, topic, 1) == [(pid, epoch + 1, ControlType.COMMIT)]
    assert committed_values(wire, topic, 0) == [b"a", b"c"]
    # The next transaction: the bumped epoch, sequences from 0.
    assert produce(wire, tid, topic, 0, pid, epoch + 1, 0, b"doomed") == 0
    assert end_v2(wire, tid, pid, epoch + 1, commit=False) == (0, pid, epoch + 2)
    assert markers(wire, topic, 0)[-1] == (pid, epoch + 2, ControlType.ABORT)
    assert committed_values(wire, topic, 0) == [b"a", b"c"]
    assert produce(wire, tid, topic, 0, pid, epoch + 2, 0, b"d") == 0
    assert end_v2(wire, tid, pid, epoch + 2, commit=True) == (0, pid, epoch + 3)
    assert committed_values(wire, topic, 0) == [b"a", b"c", b"d"]
    described = wire.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states[0]
    assert (described.transaction_state, described.producer_epoch) == ("CompleteCommit", epoch + 3)


def test_a_retried_end_txn_gets_the_same_answer(wire: WireClient) -> None:
    topic, tid = unique("retry"), unique("tid")
    create_topic(wire, topic)
    pid, epoch = init(wire, tid)
    assert produce(wire, tid, topic, 0, pid, epoch, 0, b"x") == 0
    first = end_v2(wire, tid, pid, epoch, commit=True)
    assert first == (0, pid, epoch + 1)
    assert end_v2(wire, tid, pid, epoch, commit=True) == first  # the answer was lost: same again
    assert end_v2(wire, tid, pid, epoch, commit=False)[0] == E.INVALID_TXN_STATE
    assert end_v2(wire, tid, pid, epoch + 5, commit=True)[0] == E.PRODUCER_FENCED
    assert end_v2(wire, tid, pid + 1000, epoch + 1, commit=True)[0] == E.INVALID_PRODUCER_ID_MAPPING
    assert len(markers(wire, topic, 0)) == 1


def test_late_produce_of_an_ended_transaction_is_refused_and_never_visible(wire: WireClient) -> None:
    """The gap of transactions v1: a produce of transaction N delayed past its EndTxn, to a
    partition transaction N+1 also writes, under the same epoch, joined N+1. With v2 the epoch of
    N is fenced at its end."""
    topic, tid = unique("late"), unique("tid")
    create_topic(wire, topic)
    pid, epoch = init(wire, tid)
    assert produce(wire, tid, topic, 0, pid, epoch, 0, b"n") == 0
    assert end_v2(wire, tid, pid, epoch, commit=True) == (0, pid, epoch + 1)
    assert produce(wire, tid, topic, 0, pid, epoch + 1, 0, b"n+1") == 0
    # The delayed batch of N (its next sequence, its epoch), by Produce v12 and by v9.
    assert produce(wire, tid, topic, 0, pid, epoch, 1, b"late") == E.INVALID_PRODUCER_EPOCH
    assert produce(wire, tid, topic, 0, pid, epoch, 1, b"late", version=9) == E.INVALID_PRODUCER_EPOCH
    assert end_v2(wire, tid, pid, epoch + 1, commit=True) == (0, pid, epoch + 2)
    assert committed_values(wire, topic, 0) == [b"n", b"n+1"]
    assert b"late" not in [r.value for b in iter_batches(wire.fetch_all(topic, 0)) for r in b]


def test_implicit_add_checks_the_producer(wire: WireClient) -> None:
    topic, tid = unique("check"), unique("tid")
    create_topic(wire, topic)
    pid, epoch = init(wire, tid)
    assert produce(wire, unique("other"), topic, 0, pid, epoch, 0, b"x") == E.INVALID_PRODUCER_ID_MAPPING
    assert produce(wire, tid, topic, 0, pid, epoch + 1, 0, b"x") == E.INVALID_PRODUCER_EPOCH
    assert produce(wire, tid, topic, 0, pid + 1000, epoch, 0, b"x") == E.INVALID_PRODUCER_ID_MAPPING
    assert produce(wire, tid, topic, 0, pid, epoch, 0, b"ok") == 0
    assert end_v2(wire, tid, pid, epoch, commit=True)[0] == 0
    assert committed_values(wire, topic, 0) == [b"ok"]


def offset_commit(
    wire: WireClient, version: int, tid: str, group: str, pid: int, epoch: int, topic: str, offset: int
) -> int:
    """TxnOffsetCommit of ``offset`` for partition 0; the partition's error code."""
    request = txn_offset_commit_request(tid, group, pid, epoch, topic, offset)
    return int(wire.request(request, version).topics[0].partitions[0].error_code)


def committed_offset(wire: WireClient, group: str, topic: str) -> int:
    request = OffsetFetchRequest(
        group_id=group,
        topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])],
    )
    response = wire.request(request, 6)
    return response.topics[0].partitions[0].committed_offset


def test_txn_offset_commit_v5_adds_the_offsets_partition(wire: WireClient) -> None:
    topic, tid, group = unique("offsets"), unique("tid"), unique("group")
    create_topic(wire, topic)
    pid, epoch = init(wire, tid)
    # v4 still needs AddOffsetsToTxn; v5 adds the group's __consumer_offsets partition itself.
    assert offset_commit(wire, 4, tid, group, pid, epoch, topic, 7) == E.INVALID_TXN_STATE
    assert offset_commit(wire, 5, tid, group, pid, epoch, topic, 7) == 0
    assert committed_offset(wire, group, topic) == -1  # pending until the commit
    assert end_v2(wire, tid, pid, epoch, commit=True) == (0, pid, epoch + 1)
    assert committed_offset(wire, group, topic) == 7
    # Aborted: never visible. A stale epoch is refused.
    assert offset_commit(wire, 5, tid, group, pid, epoch, topic, 9) == E.INVALID_PRODUCER_EPOCH
    assert offset_commit(wire, 5, tid, group, pid, epoch + 1, topic, 9) == 0
    assert end_v2(wire, tid, pid, epoch + 1, commit=False) == (0, pid, epoch + 2)
    assert committed_offset(wire, group, topic) == 7


def test_broker_killed_between_prepare_and_markers_rolls_the_v2_commit_forward(
    broker_factory: BrokerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    tid = unique("crash")
    monkeypatch.setenv(KILL_AFTER_PREPARE_ENV, tid)
    proc = broker_factory(CONFIG)
    topic = unique("rolled")
    with WireClient(proc.bootstrap) as wire:
        create_topic(wire, topic)
        pid, epoch = init(wire, tid)
        assert produce(wire, tid, topic, 0, pid, epoch, 0, b"a") == 0
        assert produce(wire, tid, topic, 1, pid, epoch, 0, b"b") == 0
        request = EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True)
        wire.send(request, 5)
        assert wire.closed_by_peer(timeout=10)  # SIGKILLed after PrepareCommit, no marker written
    monkeypatch.delenv(KILL_AFTER_PREPARE_ENV)
    proc.restart(kill=True)
    with WireClient(proc.bootstrap) as wire:
        # The client retries its EndTxn: the restarted coordinator finished the commit.
        for _ in range(100):
            retried = end_v2(wire, tid, pid, epoch, commit=True)
            if retried[0] != E.COORDINATOR_LOAD_IN_PROGRESS:
                break
        assert retried == (0, pid, epoch + 1)
        assert markers(wire, topic, 0) == markers(wire, topic, 1) == [(pid, epoch + 1, ControlType.COMMIT)]
        assert committed_values(wire, topic, 0) == [b"a"] and committed_values(wire, topic, 1) == [b"b"]
        assert produce(wire, tid, topic, 0, pid, epoch + 1, 0, b"next") == 0
        assert end_v2(wire, tid, pid, epoch + 1, commit=True) == (0, pid, epoch + 2)
        assert committed_values(wire, topic, 0) == [b"a", b"next"]


def test_exhausted_epoch_continues_as_a_new_producer_id() -> None:
    """The epoch is set near its end inside the broker (32766 bumps would take minutes)."""
    with run_in_process(config=CONFIG) as runner, WireClient(runner.bootstrap) as wire:
        topic, tid = unique("overflow"), unique("tid")
        create_topic(wire, topic)
        pid, _ = init(wire, tid)

        def exhaust() -> None:
            runner.broker.transaction_coordinator.txns[tid].producer_epoch = MAX_EPOCH

        runner.call(exhaust)
        assert produce(wire, tid, topic, 0, pid, MAX_EPOCH, 0, b"last") == 0
        error, new_pid, new_epoch = end_v2(wire, tid, pid, MAX_EPOCH, commit=True)
        assert (error, new_epoch) == (0, 0) and new_pid != pid
        assert markers(wire, topic, 0) == [(pid, MAX_EPOCH + 1, ControlType.COMMIT)]
        assert end_v2(wire, tid, pid, MAX_EPOCH, commit=True) == (0, new_pid, 0)  # a retry
        assert produce(wire, tid, topic, 0, pid, MAX_EPOCH, 1, b"late") == E.INVALID_PRODUCER_ID_MAPPING
        assert produce(wire, tid, topic, 0, new_pid, 0, 0, b"first") == 0
        assert end_v2(wire, tid, new_pid, 0, commit=True) == (0, new_pid, 1)
        assert committed_values(wire, topic, 0) == [b"last", b"first"]
