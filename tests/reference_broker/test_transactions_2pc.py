"""KIP-939 two-phase commit on the wire (InitProducerId v6): a 2PC transaction outlives its
requested timeout and a SIGKILL of the broker, a new producer keeps it with keepPreparedTxn
(fencing the old one) and commits or aborts it; the flags' refusals."""

from __future__ import annotations

import time

import pytest

from reference_broker.testing import BrokerFactory, BrokerProcess
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import DescribeTransactionsRequest, EndTxnRequest, InitProducerIdRequest
from tests.reference_broker.test_transactions_v2 import committed_values, end_v2, markers, produce
from tests.reference_broker.test_transactions_wire import create_topic, unique
from tests.reference_broker.wire import WireClient

CONFIG = {
    "num.partitions": 2,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "transaction.max.timeout.ms": 60_000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 100,
}
INT_MAX = 2**31 - 1


def init_2pc(wire: WireClient, tid: str, keep: bool = False) -> tuple[int, int, int, int, int]:
    """InitProducerId v6 with enable2Pc: (error, producer id, epoch, ongoing id, ongoing epoch)."""
    request = InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=500, enable2_pc=True, keep_prepared_txn=keep
    )
    r = wire.request(request, 6)
    ongoing = (r.ongoing_txn_producer_id, r.ongoing_txn_producer_epoch)
    return (r.error_code, r.producer_id, r.producer_epoch, *ongoing)


def describe(wire: WireClient, tid: str) -> tuple[str, int, int]:
    state = wire.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states[0]
    return state.transaction_state, state.producer_epoch, state.transaction_timeout_ms


def reconnect_after_load(proc: BrokerProcess, tid: str) -> WireClient:
    """A connection once the restarted broker has loaded __transaction_state."""
    deadline = time.monotonic() + 20
    while True:
        wire = WireClient(proc.bootstrap)
        state = wire.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states[0]
        if state.error_code != E.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return wire
        wire.close()
        time.sleep(0.05)


def open_2pc_transaction(proc: BrokerProcess, tid: str, topic: str) -> tuple[int, int]:
    """Producer 1: a 2PC transaction with data in two partitions, left open ("prepared")."""
    with WireClient(proc.bootstrap) as wire:
        create_topic(wire, topic)
        error, pid, epoch, ongoing_pid, ongoing_epoch = init_2pc(wire, tid)
        assert (error, ongoing_pid, ongoing_epoch) == (0, -1, -1)
        assert produce(wire, tid, topic, 0, pid, epoch, 0, b"p0") == 0
        assert produce(wire, tid, topic, 1, pid, epoch, 0, b"p1") == 0
        # Well past the 500 ms asked for (the abort task runs every 100 ms): still open.
        time.sleep(1.0)
        assert describe(wire, tid) == ("Ongoing", epoch, INT_MAX)
    return pid, epoch


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_kept_transaction_survives_a_broker_kill_and_is_completed(
    broker_factory: BrokerFactory, commit: bool
) -> None:
    proc = broker_factory(CONFIG)
    tid, topic = unique("2pc"), unique("prepared")
    pid, epoch = open_2pc_transaction(proc, tid, topic)
    proc.restart(kill=True)
    with reconnect_after_load(proc, tid) as wire:
        assert describe(wire, tid) == ("Ongoing", epoch, INT_MAX)  # not aborted by the restart
        assert committed_values(wire, topic, 0) == []
        # Producer 2 (the restarted application) keeps it.
        kept = init_2pc(wire, tid, keep=True)
        assert kept == (0, pid, epoch + 1, pid, epoch)
        # Producer 1 is fenced: no more data, no end of its own.
        assert produce(wire, tid, topic, 0, pid, epoch, 1, b"zombie") == E.INVALID_PRODUCER_EPOCH
        assert end_v2(wire, tid, pid, epoch, commit=True)[0] == E.PRODUCER_FENCED
        # The keeper may only end it, with its own epoch.
        assert produce(wire, tid, topic, 0, pid, epoch + 1, 0, b"more") == E.INVALID_TXN_STATE
        assert end_v2(wire, tid, pid, epoch + 1, commit=commit) == (0, pid, epoch + 2)
        marker = markers(wire, topic, 1)
        assert [(p, e) for p, e, _ in marker] == [(pid, epoch + 2)]
        assert committed_values(wire, topic, 0) == ([b"p0"] if commit else [])
        assert committed_values(wire, topic, 1) == ([b"p1"] if commit else [])
        assert describe(wire, tid)[:2] == ("CompleteCommit" if commit else "CompleteAbort", epoch + 2)
        # The keeper goes on with normal transactions.
        assert produce(wire, tid, topic, 0, pid, epoch + 2, 0, b"after") == 0
        assert end_v2(wire, tid, pid, epoch + 2, commit=True) == (0, pid, epoch + 3)
        assert committed_values(wire, topic, 0)[-1:] == [b"after"]


def test_keep_prepared_with_a_v1_end(broker_factory: BrokerFactory) -> None:
    """The keeper may end the kept transaction with EndTxn v4 too (no bump: markers at its epoch)."""
    proc = broker_factory(CONFIG)
    tid, topic = unique("2pc"), unique("v1end")
    pid, epoch = open_2pc_transaction(proc, tid, topic)
    with WireClient(proc.bootstrap) as wire:
        assert init_2pc(wire, tid, keep=True) == (0, pid, epoch + 1, pid, epoch)
        end = EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch + 1, committed=True)
        assert wire.request(end, 4).error_code == 0
        assert markers(wire, topic, 0) == [(pid, epoch + 1, 0x1)]
        assert committed_values(wire, topic, 0) == [b"p0"]


def test_the_flags_refusals(broker_factory: BrokerFactory) -> None:
    proc = broker_factory(CONFIG)
    with WireClient(proc.bootstrap) as wire:
        tid, topic = unique("flags"), unique("flags")
        create_topic(wire, topic)
        keep_only = InitProducerIdRequest(
            transactional_id=tid, transaction_timeout_ms=500, keep_prepared_txn=True
        )
        assert wire.request(keep_only, 6).error_code == E.INVALID_REQUEST
        # An ordinary (non-2PC) transaction cannot be kept, and it does time out.
        plain = wire.request(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=500), 6)
        assert produce(wire, tid, topic, 0, plain.producer_id, plain.producer_epoch, 0, b"x") == 0
        assert init_2pc(wire, tid, keep=True)[0] == E.INVALID_TXN_STATE
        deadline = time.monotonic() + 30  # 500 ms timeout, abort task every 100 ms: a busy machine
        while describe(wire, tid)[0] != "CompleteAbort":
            assert time.monotonic() < deadline, f"still {describe(wire, tid)[0]} after 30 s"
            time.sleep(0.1)
