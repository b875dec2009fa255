"""The leader's rules of Kafka's Partition.scala on real logs: high watermark over the ISR, ISR
expansion and shrink proposed to the controller, acks=all with min.insync.replicas."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from reference_broker.log import LogConfig, PartitionLog
from reference_broker.replication.partition import (
    FollowerState,
    IsrCommitted,
    IsrProposal,
    Partition,
)
from sdk.protocol.errors import (
    ErrorCode,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    make_error,
)
from sdk.records import RecordBatchBuilder

LAG_MS = 1_000


def batch(count: int) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(count):
        builder.append(1_000 + i, b"k", b"v%d" % i)
    return builder.build()


class Controller:
    """Commits every ISR proposal with the next partition epoch (what the controller's
    AlterPartition does when the proposal is valid) and keeps what it was asked."""

    def __init__(self) -> None:
        self.proposals: list[IsrProposal] = []

    async def __call__(self, proposal: IsrProposal) -> IsrCommitted:
        self.proposals.append(proposal)
        return IsrCommitted(proposal.leader_epoch, proposal.partition_epoch + 1, proposal.isr)


@pytest.fixture
def leader(tmp_path: Path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), now_ms=0)
    controller = Controller()
    partition = Partition("t", 0, 1, plog, alter_partition=controller,
                          replica_lag_time_max_ms=LAG_MS)
    partition.controller = controller  # type: ignore[attr-defined]
    yield partition
    plog.close()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_high_watermark_is_the_smallest_log_end_over_the_isr(leader: Partition):
    leader.make_leader(3, 0, [1, 2, 3], [1, 2], now_ms=0)
    plog = leader.log
    assert plog.leader_epoch_cache.entries[-1] == (3, 0)
    plog.append(batch(5), now_ms=10)
    assert plog.high_watermark == 0  # follower 2 has nothing yet
    leader.update_follower_fetch_state(2, 3, 0, now_ms=20)
    assert plog.high_watermark == 3
    leader.update_follower_fetch_state(3, 1, 0, now_ms=20)  # outside the ISR: not waited for
    assert plog.high_watermark == 3
    leader.update_follower_fetch_state(2, 5, 0, now_ms=30)
    assert plog.high_watermark == 5
    assert plog.read(0, 1 << 20).next_offset == 5


async def test_a_caught_up_follower_is_proposed_for_the_isr(leader: Partition):
    leader.make_leader(1, 0, [1, 2], [1], now_ms=0)
    plog = leader.log
    plog.append(batch(4), now_ms=10)
    leader.maybe_increment_high_watermark()  # what the produce path does after an append
    assert plog.high_watermark == 4  # the leader alone is the ISR
    leader.update_follower_fetch_state(2, 2, 0, now_ms=20)  # behind the high watermark
    await settle()
    assert leader.controller.proposals == []  # type: ignore[attr-defined]
    leader.update_follower_fetch_state(2, 4, 0, now_ms=30)
    assert leader.pending_isr == (1, 2)
    await settle()
    proposal = leader.controller.proposals[0]  # type: ignore[attr-defined]
    assert (proposal.leader_id, proposal.leader_epoch, proposal.partition_epoch) == (1, 1, 0)
    assert proposal.isr == (1, 2)
    assert (leader.isr, leader.partition_epoch, leader.pending_isr) == ((1, 2), 1, None)


async def test_a_lagging_follower_is_shrunk_out_and_acks_all_counts_the_isr(leader: Partition):
    leader.make_leader(1, 0, [1, 2], [1, 2], now_ms=0)
    plog = leader.log
    plog.append(batch(2), now_ms=10)
    leader.update_follower_fetch_state(2, 2, 0, now_ms=100)  # caught up at 100
    plog.append(batch(2), now_ms=200)
    leader.check_enough_replicas(2)
    waiting = asyncio.ensure_future(leader.wait_for_high_watermark(4, 2, timeout_s=30))
    await settle()
    assert not waiting.done()
    assert leader.maybe_shrink_isr(now_ms=100 + LAG_MS) is None  # not yet past the lag
    assert leader.maybe_shrink_isr(now_ms=101 + LAG_MS) == (1,)
    await settle()
    assert leader.isr == (1,)
    # The shrink let the high watermark move: the append is committed, but with fewer replicas
    # than min.insync.replicas.
    assert plog.high_watermark == 4
    with pytest.raises(NotEnoughReplicasAfterAppendError):
        await waiting
    with pytest.raises(NotEnoughReplicasError):
        leader.check_enough_replicas(2)


async def test_acks_all_waits_for_the_follower_then_times_out_or_loses_leadership(leader: Partition):
    leader.make_leader(1, 0, [1, 2], [1, 2], now_ms=0)
    plog = leader.log
    plog.append(batch(3), now_ms=10)
    waiting = asyncio.ensure_future(leader.wait_for_high_watermark(3, 2, timeout_s=30))
    await settle()
    leader.update_follower_fetch_state(2, 3, 0, now_ms=20)
    await asyncio.wait_for(waiting, 5)  # answered as soon as the follower has it
    plog.append(batch(1), now_ms=30)
    with pytest.raises(RequestTimedOutError):
        await leader.wait_for_high_watermark(4, 2, timeout_s=0.01)
    waiting = asyncio.ensure_future(leader.wait_for_high_watermark(4, 2, timeout_s=30))
    await settle()
    assert leader.make_follower(2, 2, 1, [1, 2])
    with pytest.raises(NotLeaderOrFollowerError):
        await waiting
    assert not leader.make_follower(2, 1, 1, [1, 2])  # an older epoch is ignored


def test_follower_caught_up_time_follows_kafkas_rule():
    state = FollowerState(2)
    state.reset(now_ms=0, leader_log_end_offset=10, in_sync=False)
    state.update(fetch_offset=5, log_start_offset=0, now_ms=100, leader_log_end_offset=10)
    assert state.last_caught_up_ms == 0  # behind the leader's log end at the fetch
    state.update(fetch_offset=10, log_start_offset=0, now_ms=200, leader_log_end_offset=12)
    assert state.last_caught_up_ms == 100  # had, at 100, everything the leader had before
    state.update(fetch_offset=12, log_start_offset=0, now_ms=300, leader_log_end_offset=12)
    assert state.last_caught_up_ms == 300


async def test_a_follower_with_the_whole_log_stays_in_sync_however_long_it_is_silent(leader: Partition):
    leader.make_leader(1, 0, [1, 2], [1, 2], now_ms=0)
    leader.log.append(batch(2), now_ms=10)
    leader.update_follower_fetch_state(2, 2, 0, now_ms=100)
    assert leader.out_of_sync_replicas(now_ms=100 + 10 * LAG_MS) == []
    leader.log.append(batch(1), now_ms=200)
    assert leader.out_of_sync_replicas(now_ms=101 + LAG_MS) == [2]


def test_preferred_read_replica_is_a_caught_up_replica_in_the_clients_rack(leader: Partition):
    racks = {1: "r1", 2: "r2", 3: "r2", 4: "r3"}
    leader.make_leader(1, 0, [1, 2, 3, 4], [1, 2, 3, 4], now_ms=0)
    leader.log.append(batch(10), now_ms=10)
    leader.update_follower_fetch_state(2, 6, 0, now_ms=100)
    leader.update_follower_fetch_state(3, 10, 0, now_ms=100)
    leader.update_follower_fetch_state(4, 10, 0, now_ms=100)
    pick = leader.preferred_read_replica
    assert pick("r2", 5, 200, racks.get) == 3  # the longer log of the two in r2
    assert pick("r2", 8, 200, racks.get) == 3  # 2 does not have offset 8
    assert pick("r1", 5, 200, racks.get) == -1  # the leader is in the client's rack
    assert pick("", 5, 200, racks.get) == -1
    assert pick("r9", 5, 200, racks.get) == -1  # nobody there
    leader.log.append(batch(1), now_ms=20)  # 3 is behind now and not caught up within the lag
    assert pick("r2", 5, 100 + 2 * LAG_MS, racks.get) == -1


async def test_min_insync_replicas_is_capped_at_the_replica_count(leader: Partition):
    """Kafka's effectiveMinIsr: min.insync.replicas 3 on a topic of 2 replicas needs both."""
    leader.make_leader(1, 0, [1, 2], [1, 2], now_ms=0)
    plog = leader.log
    leader.check_enough_replicas(3)
    plog.append(batch(2), now_ms=10)
    waiting = asyncio.ensure_future(leader.wait_for_high_watermark(2, 3, timeout_s=30))
    await settle()
    assert not waiting.done()
    leader.update_follower_fetch_state(2, 2, 0, now_ms=20)
    await waiting  # committed by both replicas: enough, though fewer than 3
    plog.append(batch(1), now_ms=30)  # the follower falls behind
    assert leader.maybe_shrink_isr(now_ms=21 + LAG_MS) == (1,)
    await settle()
    with pytest.raises(NotEnoughReplicasError, match=r"min\.isr requirement of 2"):
        leader.check_enough_replicas(3)


class Registrations:
    """Brokers' registrations as the leader's metadata image has them (broker id -> state)."""

    def __init__(self) -> None:
        self.brokers: dict[int, SimpleNamespace] = {}

    def set(self, broker_id: int, epoch: int, *, fenced: bool = False,
            shutting_down: bool = False) -> None:
        self.brokers[broker_id] = SimpleNamespace(epoch=epoch, fenced=fenced,
                                                  in_controlled_shutdown=shutting_down)

    def __call__(self, broker_id: int) -> SimpleNamespace | None:
        return self.brokers.get(broker_id)


@pytest.fixture
def registrations(leader: Partition) -> Registrations:
    found = Registrations()
    found.set(1, 100)
    leader.registration = found
    leader.local_broker_epoch = lambda: 100
    return found


async def test_a_fetch_from_an_older_incarnation_changes_nothing(leader: Partition,
                                                                 registrations: Registrations) -> None:
    """KIP-903: the broker re-registered (say after losing its disk); a late fetch of its previous
    incarnation must not make the leader believe the new one has the log."""
    registrations.set(2, 250)
    leader.make_leader(1, 0, [1, 2], [1], now_ms=0)
    leader.log.append(batch(5), now_ms=10)
    leader.maybe_increment_high_watermark()  # the leader alone in the ISR: committed
    leader.update_follower_fetch_state(2, 0, 0, now_ms=20, broker_epoch=250)
    with pytest.raises(NotLeaderOrFollowerError, match="stale fetch"):
        leader.update_follower_fetch_state(2, 5, 0, now_ms=30, broker_epoch=200)
    await settle()
    assert leader.followers[2].log_end_offset == 0
    assert leader.controller.proposals == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("state", ["fenced", "shutting down", "unregistered", "epoch changed"])
async def test_a_caught_up_but_ineligible_follower_is_not_proposed(leader: Partition,
                                                                  registrations: Registrations,
                                                                  state: str) -> None:
    if state == "fenced":
        registrations.set(2, 250, fenced=True)
    elif state == "shutting down":
        registrations.set(2, 250, shutting_down=True)
    elif state == "epoch changed":
        registrations.set(2, 200)  # the leader's metadata has not seen the registration yet
    leader.make_leader(1, 0, [1, 2], [1], now_ms=0)
    leader.log.append(batch(5), now_ms=10)
    leader.update_follower_fetch_state(2, 5, 0, now_ms=20, broker_epoch=250)
    await settle()
    assert leader.controller.proposals == []  # type: ignore[attr-defined]
    assert leader.isr == (1,)
    assert not leader.replica_isr_eligible(2)


async def test_proposals_carry_the_broker_epochs_the_leader_knows(leader: Partition,
                                                                 registrations: Registrations) -> None:
    registrations.set(2, 250)
    registrations.set(3, 260)
    leader.make_leader(1, 0, [1, 2, 3], [1, 3], now_ms=0)
    leader.log.append(batch(5), now_ms=10)
    leader.update_follower_fetch_state(2, 5, 0, now_ms=20, broker_epoch=250)
    await settle()
    [proposal] = leader.controller.proposals  # type: ignore[attr-defined]
    assert proposal.isr == (1, 2, 3)
    # follower 3 has not fetched in this leadership: -1 leaves its epoch unchecked
    assert proposal.broker_epochs == (100, 250, -1)
    assert leader.isr == (1, 2, 3)


async def test_a_refused_expansion_keeps_the_isr_and_is_proposed_again(tmp_path: Path) -> None:
    """INELIGIBLE_REPLICA from the controller (its metadata is newer than the leader's): the
    leader keeps the committed ISR and proposes again on a later fetch."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), now_ms=0)
    asked: list[IsrProposal] = []

    async def refusing(proposal: IsrProposal) -> IsrCommitted:
        asked.append(proposal)
        if len(asked) == 1:
            raise make_error(ErrorCode.INELIGIBLE_REPLICA)
        return IsrCommitted(proposal.leader_epoch, proposal.partition_epoch + 1, proposal.isr)

    partition = Partition("t", 0, 1, plog, alter_partition=refusing, replica_lag_time_max_ms=LAG_MS)
    try:
        partition.make_leader(1, 0, [1, 2], [1], now_ms=0)
        plog.append(batch(5), now_ms=10)
        partition.update_follower_fetch_state(2, 5, 0, now_ms=20)
        await settle()
        assert (partition.isr, partition.pending_isr) == ((1,), None)
        partition.update_follower_fetch_state(2, 5, 0, now_ms=30)
        await settle()
        assert len(asked) == 2 and partition.isr == (1, 2)
    finally:
        plog.close()
