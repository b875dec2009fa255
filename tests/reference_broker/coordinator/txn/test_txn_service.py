"""The transaction coordinator on a real Storage and a ManualClock (no sockets): the state machine,
markers and the last stable offset, fencing (KIP-360 bumps included), timeouts, transactional
offsets through the group coordinator, and reloading what a crash left prepared."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from reference_broker.clock import ManualClock
from reference_broker.config import BrokerConfig
from reference_broker.coordinator.group.service import GroupCoordinatorService
from reference_broker.coordinator.group.state import CommittedOffset
from reference_broker.coordinator.txn import records
from reference_broker.coordinator.txn.coordinator import EXPIRY_STEP
from reference_broker.coordinator.txn.service import LOAD_STEP_RECORDS, TransactionCoordinatorService
from reference_broker.coordinator.txn.state import TxnState
from reference_broker.producer_ids import ProducerIdManager
from reference_broker.storage import CONSUMER_OFFSETS, TRANSACTION_STATE, Storage
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.errors import KafkaStorageError
from sdk.records import ControlType, RecordBatchBuilder, iter_batches

TIMEOUT_MS = 10_000


class Node:
    """Storage, group and transaction services of one broker run, without the network."""

    def __init__(self, data_dir: Path, clock: ManualClock, **properties: object):
        props = {
            "offsets.topic.num.partitions": 3,
            "transaction.state.log.num.partitions": 3,
            "transaction.max.timeout.ms": 60_000,
            **properties,
        }
        self.config = BrokerConfig.build(data_dir, properties=props)
        self.storage = Storage.open(self.config)
        self.groups = GroupCoordinatorService(self.config, self.storage, clock)
        self.txn = TransactionCoordinatorService(
            self.config, self.storage, clock, ProducerIdManager(data_dir), self.groups
        )
        self.coordinator = self.txn.coordinator

    async def start(self) -> Node:
        await self.groups.start()
        await self.txn.start()
        await self.txn.wait_loaded()
        return self

    async def stop(self) -> None:
        await self.txn.stop()
        await self.groups.stop()
        self.storage.close()

    def produce(
        self, topic: str, partition: int, pid: int, epoch: int, seq: int, values: list[bytes]
    ) -> None:
        builder = RecordBatchBuilder(
            producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
        )
        for value in values:
            builder.append(0, None, value)
        self.storage.append(topic, partition, builder.build())

    def committed_values(self, topic: str, partition: int) -> list[bytes]:
        """What a read_committed consumer gets: data below the LSO minus aborted transactions."""
        data = self.storage.read(topic, partition, 0, 1 << 20, min_one=True, committed=True)
        aborted = {pid: first for pid, first in data.aborted}
        values = []
        for batch in iter_batches(bytes(data.records)):
            if batch.is_control:
                if batch.producer_id in aborted and batch.control_record().type == ControlType.ABORT:
                    del aborted[batch.producer_id]
                continue
            if (
                batch.is_transactional
                and batch.producer_id in aborted
                and batch.base_offset >= aborted[batch.producer_id]
            ):
                continue
            values.extend(r.value for r in batch)
        return values


async def test_commit_writes_markers_and_releases_the_lso(node: Node) -> None:
    c = node.coordinator
    init = c.init_producer_id("tx", TIMEOUT_MS)
    assert (init.error, init.producer_epoch) == (0, 0)
    pid = init.producer_id
    assert c.add_partitions("tx", pid, 0, [("data", 0), ("data", 1)]) == 0
    assert c.txns["tx"].state is TxnState.ONGOING
    node.produce("data", 0, pid, 0, 0, [b"a", b"b"])
    node.produce("data", 1, pid, 0, 0, [b"c"])
    assert node.storage.offsets("data", 0) == (0, 2, 0)  # the LSO stays before the open transaction
    assert node.committed_values("data", 0) == []
    assert c.end_transaction("tx", pid, 0, commit=True) == 0
    assert c.txns["tx"].state is TxnState.COMPLETE_COMMIT and not c.txns["tx"].partitions
    assert node.storage.offsets("data", 0) == (0, 3, 3)  # data + COMMIT marker, all stable
    assert node.committed_values("data", 0) == [b"a", b"b"] and node.committed_values("data", 1) == [b"c"]
    # The states went through __transaction_state: Empty, Ongoing, PrepareCommit, CompleteCommit.
    partition = records.partition_for("tx", 3)
    states = [
        records.parse_value(r.value).state
        for b in node.storage.read_batches(TRANSACTION_STATE, partition)
        for r in b
    ]
    assert states == [TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    # A retried commit succeeds; an abort of the committed transaction is refused.
    assert c.end_transaction("tx", pid, 0, commit=True) == 0
    assert c.end_transaction("tx", pid, 0, commit=False) == E.INVALID_TXN_STATE


async def test_abort_is_in_the_aborted_index_and_hidden(node: Node) -> None:
    c = node.coordinator
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert c.add_partitions("tx", pid, 0, [("data", 0)]) == 0
    node.produce("data", 0, pid, 0, 0, [b"doomed"])
    assert c.end_transaction("tx", pid, 0, commit=False) == 0
    fetched = node.storage.read("data", 0, 0, 1 << 20, min_one=True, committed=True)
    assert fetched.aborted == [(pid, 0)] and fetched.last_stable_offset == 2
    assert node.committed_values("data", 0) == []
    # The next transaction of the same producer commits normally.
    assert c.add_partitions("tx", pid, 0, [("data", 0)]) == 0
    node.produce("data", 0, pid, 0, 1, [b"kept"])
    assert c.end_transaction("tx", pid, 0, commit=True) == 0
    assert node.committed_values("data", 0) == [b"kept"]


async def test_fencing_and_kip360_bumps(node: Node) -> None:
    c = node.coordinator
    first = c.init_producer_id("tx", TIMEOUT_MS)
    second = c.init_producer_id("tx", TIMEOUT_MS)
    assert second.producer_id == first.producer_id and second.producer_epoch == 1
    pid = first.producer_id
    assert c.add_partitions("tx", pid, 0, [("data", 0)]) == E.PRODUCER_FENCED
    assert c.end_transaction("tx", pid, 0, commit=True) == E.PRODUCER_FENCED
    assert c.add_partitions("tx", pid + 999, 1, [("data", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
    # KIP-360: the current producer bumps its own epoch ...
    bumped = c.init_producer_id("tx", TIMEOUT_MS, pid, 1)
    assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == (0, pid, 2)
    # ... a retry of that bump (its answer lost) gets the same answer, a stale epoch is fenced.
    again = c.init_producer_id("tx", TIMEOUT_MS, pid, 1)
    assert (again.error, again.producer_epoch) == (0, 2)
    assert c.init_producer_id("tx", TIMEOUT_MS, pid, 0).error == E.PRODUCER_FENCED
    assert c.init_producer_id("tx", TIMEOUT_MS, pid + 999, 2).error == E.PRODUCER_FENCED
    # Timeouts are checked against transaction.max.timeout.ms.
    assert c.init_producer_id("tx", 60_001).error == E.INVALID_TRANSACTION_TIMEOUT
    assert c.init_producer_id("tx", 0).error == E.INVALID_TRANSACTION_TIMEOUT
    assert c.init_producer_id("", TIMEOUT_MS).error == E.INVALID_REQUEST


async def test_epoch_exhaustion_moves_to_a_new_producer_id(node: Node) -> None:
    c = node.coordinator
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    c.txns["tx"].producer_epoch = 32765
    fresh = c.init_producer_id("tx", TIMEOUT_MS)
    assert fresh.error == 0 and fresh.producer_id != pid and fresh.producer_epoch == 0
    assert c.txns["tx"].previous_producer_id == pid
    assert c.by_producer_id == {fresh.producer_id: "tx"}


async def test_init_aborts_the_previous_producers_open_transaction(node: Node) -> None:
    c = node.coordinator
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert c.add_partitions("tx", pid, 0, [("data", 0)]) == 0
    node.produce("data", 0, pid, 0, 0, [b"zombie"])
    successor = c.init_producer_id("tx", TIMEOUT_MS)
    # Aborted with a fencing epoch (1), then bumped for the new producer (2).
    assert (successor.error, successor.producer_id, successor.producer_epoch) == (0, pid, 2)
    assert node.storage.offsets("data", 0)[2] == 2 and node.committed_values("data", 0) == []
    markers = [
        b
        for b in iter_batches(
            bytes(node.storage.read("data", 0, 1, 4096, min_one=True, committed=False).records)
        )
    ]
    assert markers[0].is_control and markers[0].producer_epoch == 1
    # The zombie's late write is refused by the coordinator's check and by the log's epoch.
    assert c.verify_produce(pid, 0, ("data", 0)) == E.INVALID_PRODUCER_EPOCH


async def test_produce_outside_the_transaction_is_refused(node: Node) -> None:
    c = node.coordinator
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert c.verify_produce(pid, 0, ("data", 0)) == E.INVALID_TXN_STATE  # no transaction yet
    assert c.add_partitions("tx", pid, 0, [("data", 0)]) == 0
    assert c.verify_produce(pid, 0, ("data", 0)) == 0
    assert c.verify_produce(pid, 0, ("data", 1)) == E.INVALID_TXN_STATE  # not added
    assert c.verify_produce(pid + 1, 0, ("data", 0)) == E.INVALID_TXN_STATE  # unknown producer
    assert c.end_transaction("tx", pid, 0, commit=True) == 0
    # A late batch of the ended transaction cannot open a new one on the partition.
    assert c.verify_produce(pid, 0, ("data", 0)) == E.INVALID_TXN_STATE
    assert c.verify_partitions("tx", pid, 0, [("data", 0)]) == {("data", 0): E.INVALID_TXN_STATE}


async def test_timed_out_transaction_is_aborted_with_an_epoch_bump(node: Node, clock: ManualClock) -> None:
    c = node.coordinator
    pid = c.init_producer_id("tx", 1000).producer_id
    assert c.add_partitions("tx", pid, 0, [("data", 1)]) == 0
    node.produce("data", 1, pid, 0, 0, [b"hung"])
    clock.advance(999)
    assert c.abort_timed_out_transactions() == 0
    clock.advance(2)
    assert c.abort_timed_out_transactions() == 1
    meta = c.txns["tx"]
    assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, 1)
    assert node.storage.offsets("data", 1)[2] == 2 and node.committed_values("data", 1) == []
    assert c.end_transaction("tx", pid, 0, commit=True) == E.PRODUCER_FENCED
    assert c.init_producer_id("tx", 1000, pid, 0).error == E.PRODUCER_FENCED


async def test_transactional_ids_expire(tmp_path: Path, clock: ManualClock) -> None:
    node = await Node(tmp_path, clock, **{"transactional.id.expiration.ms": 5000}).start()
    try:
        c = node.coordinator
        pid = c.init_producer_id("idle", TIMEOUT_MS).producer_id
        c.init_producer_id("busy", TIMEOUT_MS)
        node.storage.create_topic("data", 1, {})
        busy_pid = c.txns["busy"].producer_id
        assert c.add_partitions("busy", busy_pid, 0, [("data", 0)]) == 0
        clock.advance(5000)
        assert c.expire_transactional_ids() == 1  # an open transaction keeps its id
        assert "idle" not in c.txns and pid not in c.by_producer_id and "busy" in c.txns
    finally:
        await node.stop()
    node = await Node(tmp_path, clock).start()
    try:
        assert set(node.coordinator.txns) == {"busy"}  # the tombstone survives the restart
    finally:
        await node.stop()


async def test_transactional_offsets_visible_only_after_commit(tmp_path: Path, clock: ManualClock) -> None:
    node = await Node(tmp_path, clock).start()
    node.storage.create_topic("in", 1, {})
    groups, c = node.groups.coordinator, node.coordinator
    offsets_tp = (CONSUMER_OFFSETS, groups.partition_for("g"))
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert c.verify_offset_commit("tx", pid, 0, offsets_tp) == E.INVALID_TXN_STATE  # AddOffsetsToTxn first
    node.groups.store.ensure_topic()
    assert c.add_partitions("tx", pid, 0, [offsets_tp]) == 0
    assert c.verify_offset_commit("tx", pid, 0, offsets_tp) == 0
    offset = CommittedOffset(7, -1, "", clock.now_ms())
    assert groups.commit_transactional_offsets("g", pid, 0, -1, "", None, {("in", 0): offset}) == {
        ("in", 0): 0
    }
    assert groups.fetch_offsets("g", [("in", 0)])[1] == {("in", 0): (None, 0)}
    assert groups.fetch_offsets("g", [("in", 0)], require_stable=True)[1] == {
        ("in", 0): (None, E.UNSTABLE_OFFSET_COMMIT)
    }
    # KIP-447: a member id or generation that does not match the group is refused.
    assert groups.commit_transactional_offsets("g", pid, 0, 3, "", None, {("in", 0): offset}) == {
        ("in", 0): E.ILLEGAL_GENERATION
    }
    assert groups.commit_transactional_offsets("g", pid, 0, -1, "ghost", None, {("in", 0): offset}) == {
        ("in", 0): E.UNKNOWN_MEMBER_ID
    }
    assert c.end_transaction("tx", pid, 0, commit=True) == 0
    assert groups.fetch_offsets("g", [("in", 0)], require_stable=True)[1][("in", 0)][0].offset == 7
    # A second transaction's offsets are aborted: the committed ones stay.
    assert c.add_partitions("tx", pid, 0, [offsets_tp]) == 0
    later = CommittedOffset(50, -1, "", clock.now_ms())
    groups.commit_transactional_offsets("g", pid, 0, -1, "", None, {("in", 0): later})
    assert c.end_transaction("tx", pid, 0, commit=False) == 0
    assert groups.fetch_offsets("g", [("in", 0)])[1][("in", 0)][0].offset == 7
    # A third stays open across a restart: pending after the reload, then aborted by the timeout.
    assert c.add_partitions("tx", pid, 0, [offsets_tp]) == 0
    groups.commit_transactional_offsets("g", pid, 0, -1, "", None, {("in", 0): later})
    await node.stop()

    node = await Node(tmp_path, clock).start()
    try:
        groups, c = node.groups.coordinator, node.coordinator
        assert groups.fetch_offsets("g", [("in", 0)])[1][("in", 0)][0].offset == 7
        assert groups.fetch_offsets("g", [("in", 0)], require_stable=True)[1][("in", 0)][1] == (
            E.UNSTABLE_OFFSET_COMMIT
        )
        assert c.txns["tx"].state is TxnState.ONGOING
        clock.advance(TIMEOUT_MS + 1)
        assert c.abort_timed_out_transactions() == 1
        assert groups.fetch_offsets("g", [("in", 0)], require_stable=True)[1][("in", 0)][0].offset == 7
    finally:
        await node.stop()


@pytest.mark.parametrize("commit", [True, False])
async def test_a_prepared_transaction_is_finished_after_a_crash(
    tmp_path: Path, clock: ManualClock, commit: bool
) -> None:
    node = await Node(tmp_path, clock).start()
    node.storage.create_topic("data", 2, {})
    c = node.coordinator
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert c.add_partitions("tx", pid, 0, [("data", 0), ("data", 1)]) == 0
    node.produce("data", 0, pid, 0, 0, [b"x"])
    node.produce("data", 1, pid, 0, 0, [b"y"])
    real_writer = c.write_marker

    def storage_down(tp: tuple[str, int], commit: bool, pid: int, epoch: int, coordinator_epoch: int) -> None:
        if tp == ("data", 1):
            raise KafkaStorageError("disk gone")
        real_writer(tp, commit, pid, epoch, coordinator_epoch)

    c.write_marker = storage_down
    assert c.end_transaction("tx", pid, 0, commit=commit) == 0  # decided, one marker written
    prepared = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    assert c.txns["tx"].state is prepared and c.txns["tx"].partitions == {("data", 1)}
    assert c.add_partitions("tx", pid, 0, [("data", 0)]) == E.CONCURRENT_TRANSACTIONS
    assert c.end_transaction("tx", pid, 0, commit=commit) == E.CONCURRENT_TRANSACTIONS
    assert node.storage.offsets("data", 1)[2] == 0  # half done: partition 1 still unstable
    await node.stop()  # the crash: nothing more is written

    node = await Node(tmp_path, clock).start()
    try:
        meta = node.coordinator.txns["tx"]
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        assert meta.state is done and not meta.markers_pending
        expected = [b"x", b"y"] if commit else []
        assert node.committed_values("data", 0) + node.committed_values("data", 1) == expected
        assert node.storage.offsets("data", 1)[2] == node.storage.offsets("data", 1)[1]
    finally:
        await node.stop()


async def test_failed_marker_is_retried_by_the_periodic_task(node: Node) -> None:
    c = node.coordinator
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert c.add_partitions("tx", pid, 0, [("data", 0)]) == 0
    node.produce("data", 0, pid, 0, 0, [b"x"])
    real_writer = c.write_marker
    failures = [KafkaStorageError("disk busy")]

    def flaky(tp: tuple[str, int], commit: bool, pid: int, epoch: int, coordinator_epoch: int) -> None:
        if failures:
            raise failures.pop()
        real_writer(tp, commit, pid, epoch, coordinator_epoch)

    c.write_marker = flaky
    assert c.end_transaction("tx", pid, 0, commit=True) == 0
    assert c.txns["tx"].state is TxnState.PREPARE_COMMIT
    assert c.init_producer_id("tx", TIMEOUT_MS).producer_epoch == 1  # completes first, then bumps
    assert node.committed_values("data", 0) == [b"x"]


async def test_offset_expiry_keeps_a_group_whose_offsets_are_pending(node: Node, clock: ManualClock) -> None:
    groups, c = node.groups.coordinator, node.coordinator
    node.groups.store.ensure_topic()
    offsets_tp = (CONSUMER_OFFSETS, groups.partition_for("fresh"))
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert c.add_partitions("tx", pid, 0, [offsets_tp]) == 0
    pending = {("data", 0): CommittedOffset(3, -1, "", clock.now_ms())}
    assert groups.commit_transactional_offsets("fresh", pid, 0, -1, "", None, pending) == {("data", 0): 0}
    groups.expire_offsets()  # an empty group without committed offsets, but with pending ones
    assert c.end_transaction("tx", pid, 0, commit=True) == 0
    assert groups.fetch_offsets("fresh", [("data", 0)])[1][("data", 0)][0].offset == 3


async def test_duration_filter_lists_every_state_whose_transaction_began_long_enough_ago(
    node: Node, clock: ManualClock
) -> None:
    """ListTransactions' duration filter (KIP-664) as Kafka applies it: a transaction in any state
    but Dead is listed when its latest transaction began more than the filter ago."""
    c = node.coordinator
    committed = c.init_producer_id("done", TIMEOUT_MS).producer_id
    assert c.add_partitions("done", committed, 0, [("data", 0)]) == 0
    assert c.end_transaction("done", committed, 0, commit=True) == 0
    clock.advance(5000)
    ongoing = c.init_producer_id("open", TIMEOUT_MS).producer_id
    assert c.add_partitions("open", ongoing, 0, [("data", 1)]) == 0
    clock.advance(1000)

    def listed(duration_ms: int) -> list[tuple[str, TxnState]]:
        return [(m.transactional_id, m.state) for m in c.list_transactions(None, set(), duration_ms, None)]

    assert listed(-1) == [("done", TxnState.COMPLETE_COMMIT), ("open", TxnState.ONGOING)]
    assert listed(999) == [("done", TxnState.COMPLETE_COMMIT), ("open", TxnState.ONGOING)]
    assert listed(1000) == [("done", TxnState.COMPLETE_COMMIT)]  # exactly the filter: not listed
    assert listed(6000) == []


async def test_idle_transactional_ids_expire_in_bounded_steps(tmp_path: Path, clock: ManualClock) -> None:
    """Each step of the expiry round handles at most EXPIRY_STEP ids; the rest follow as timers,
    so other work runs between them, and the round still expires every idle id."""
    node = await Node(tmp_path, clock, **{"transactional.id.expiration.ms": 5000}).start()
    try:
        c = node.coordinator
        ids = 2 * EXPIRY_STEP + 500
        for i in range(ids):
            c.init_producer_id(f"idle-{i}", TIMEOUT_MS)
        clock.advance(5000)
        assert c.expire_transactional_ids() == EXPIRY_STEP
        assert len(c.txns) == ids - EXPIRY_STEP
        assert c.expire_transactional_ids() == 0  # the round in progress is not started twice
        clock.advance(0)  # the remaining steps, one timer each
        assert c.txns == {}
    finally:
        await node.stop()
    node = await Node(tmp_path, clock).start()
    try:
        assert node.coordinator.txns == {}
    finally:
        await node.stop()


async def test_a_large_transaction_state_loads_in_steps_that_let_other_work_run(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Work queued on the event loop runs between the load's steps, not only before or after."""
    node = await Node(tmp_path, clock, **{"transaction.state.log.num.partitions": 1}).start()
    try:
        for i in range(3 * LOAD_STEP_RECORDS):
            node.coordinator.init_producer_id(f"tx-{i}", TIMEOUT_MS)
    finally:
        await node.stop()
    node = Node(tmp_path, clock, **{"transaction.state.log.num.partitions": 1})
    loaded_when_seen: list[int] = []  # ids installed each time other work got the loop

    async def other_client() -> None:
        while node.coordinator.loading:
            loaded_when_seen.append(len(node.coordinator.txns))
            await asyncio.sleep(0)

    await node.groups.start()
    await node.txn.start()
    other = asyncio.create_task(other_client())
    await node.txn.wait_loaded()
    await other
    try:
        total = 3 * LOAD_STEP_RECORDS
        assert len(node.coordinator.txns) == total
        assert any(0 < seen < total for seen in loaded_when_seen), loaded_when_seen
    finally:
        await node.stop()
