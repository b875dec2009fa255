"""The implicit add's errors on the wire, one map for both paths (Kafka's AddPartitionsToTxnManager:
PRODUCER_FENCED as INVALID_PRODUCER_EPOCH), and the produce path's own translation of the retriable
ones (Kafka's ReplicaManager: NOT_ENOUGH_REPLICAS, which every producer retries) while TxnOffsetCommit
v5 answers them as they are."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reference_broker.testing import InProcessBroker, run_in_process
from sdk.protocol.errors import ErrorCode as E
from tests.reference_broker.test_transactions_v2 import CONFIG, init, produce
from tests.reference_broker.test_transactions_wire import create_topic, txn_offset_commit_request, unique
from tests.reference_broker.wire import WireClient


@pytest.fixture
def runner() -> Iterator[InProcessBroker]:
    with run_in_process(config=CONFIG) as started:
        yield started


def _set_loading(runner: InProcessBroker, loading: bool) -> None:
    def apply() -> None:
        runner.broker.transaction_coordinator.loading = loading

    runner.call(apply)


def test_a_loading_coordinator_is_not_enough_replicas_to_produce_and_load_in_progress_to_commit(
    runner: InProcessBroker,
) -> None:
    topic, tid, group = unique("t"), unique("tx"), unique("g")
    with WireClient(runner.bootstrap) as wire:
        create_topic(wire, topic)
        pid, epoch = init(wire, tid)
        _set_loading(runner, True)
        assert produce(wire, tid, topic, 0, pid, epoch, 0, b"early") == E.NOT_ENOUGH_REPLICAS
        commit = txn_offset_commit_request(tid, group, pid, epoch, topic, 3)
        answer = wire.request(commit, 5)
        assert answer.topics[0].partitions[0].error_code == E.COORDINATOR_LOAD_IN_PROGRESS
        _set_loading(runner, False)
        assert produce(wire, tid, topic, 0, pid, epoch, 0, b"now") == E.NONE
        assert wire.request(commit, 5).topics[0].partitions[0].error_code == E.NONE


def test_a_fenced_epoch_is_invalid_producer_epoch_on_both_paths(runner: InProcessBroker) -> None:
    topic, tid, group = unique("t"), unique("tx"), unique("g")
    with WireClient(runner.bootstrap) as wire:
        create_topic(wire, topic)
        pid, epoch = init(wire, tid)
        init(wire, tid)  # a new producer of the id fences the first
        assert produce(wire, tid, topic, 0, pid, epoch, 0, b"fenced") == E.INVALID_PRODUCER_EPOCH
        answer = wire.request(txn_offset_commit_request(tid, group, pid, epoch, topic, 3), 5)
        assert answer.topics[0].partitions[0].error_code == E.INVALID_PRODUCER_EPOCH
