"""One replicated partition on this broker: leader or follower state over its ``PartitionLog``.

Kafka's ``Partition`` (core/cluster/Partition.scala), leader side:

- Each follower's fetch state (:class:`FollowerState`, Kafka's ``Replica``): its log end offset
  (the offset it fetches from) and ``last_caught_up_ms``, the last time it had everything the
  leader had when it asked (its fetch offset reached the leader's log end offset then, or the
  leader's log end offset of its previous fetch).
- High watermark = the smallest log end offset over the leader and the *maximal* ISR (the ISR
  plus a replica being added by an ISR change still in flight), never moving back; it moves on
  follower fetches and ISR changes, and appends waiting for it (acks=all) are answered then.
- ISR expansion: a follower outside the ISR whose log end reached the high watermark and the
  start of the leader's epoch is proposed for the ISR, if it is eligible (Kafka's
  ``isReplicaIsrEligible``, KIP-903): its broker is registered, unfenced, not in controlled
  shutdown, and the broker epoch its fetches carry is the one of its registration in the metadata
  (or -1, a fetcher that does not say it). A fetch carrying an epoch older than the registration's
  comes from a previous incarnation of the broker (one that may since have lost its disk): it is
  answered NOT_LEADER_OR_FOLLOWER and changes nothing. Proposals carry each ISR member's broker
  epoch (the leader's own, the followers' from their fetches, -1 when none is known) so the
  controller refuses them (INELIGIBLE_REPLICA) when a member's registration changed; the leader
  then keeps the ISR it has, and a later fetch proposes again.
- Shrink: an ISR follower not caught up for ``replica.lag.time.max.ms`` is proposed for removal
  (:meth:`Partition.maybe_shrink_isr`, called periodically). Proposals go to the controller
  through ``alter_partition``; one is in flight at a time and only the controller's answer (or
  new metadata) changes the ISR.
- acks=all: refused with NOT_ENOUGH_REPLICAS before the append when the ISR is smaller than
  ``min.insync.replicas``; once the high watermark covers the append, NOT_ENOUGH_REPLICAS_AFTER_APPEND
  if the ISR shrank below it meanwhile.

Follower side: the state the fetcher needs (leader id and epoch); the log's high watermark is
set from the leader's fetch responses.

All methods run on the event loop; only :meth:`Partition.wait_for_high_watermark` waits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sdk.protocol.errors import (
    KafkaError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)

if TYPE_CHECKING:
    from reference_broker.log.partition_log import PartitionLog

log = logging.getLogger("reference_broker.replication")

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class IsrProposal:
    """An ISR change the leader asks the controller for (AlterPartition). ``broker_epochs`` is
    each member's broker epoch in ``isr``'s order (-1: not known, the controller skips the check)."""

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    broker_epochs: tuple[int, ...] = ()

    def epoch_of(self, replica: int) -> int:
        """``replica``'s broker epoch in the proposal (-1 when it carries none)."""
        if len(self.broker_epochs) != len(self.isr):
            return -1
        return self.broker_epochs[self.isr.index(replica)]


class BrokerRegistrationView(Protocol):
    """What the leader reads of a broker's registration in the metadata image."""

    @property
    def epoch(self) -> int: ...

    @property
    def fenced(self) -> bool: ...

    @property
    def in_controlled_shutdown(self) -> bool: ...


#: A broker's registration in the latest metadata, or None when it is not registered.
RegistrationLookup = Callable[[int], BrokerRegistrationView | None]


@dataclass(frozen=True)
class IsrCommitted:
    """The controller's answer to an :class:`IsrProposal`: the partition's state as committed."""

    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


#: Sends a proposal to the controller; returns what it committed, raises ``KafkaError`` when
#: refused (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, ...).
AlterPartitionSender = Callable[[IsrProposal], Awaitable[IsrCommitted]]


@dataclass
class FollowerState:
    """What the leader knows of one follower (Kafka's ``Replica``)."""

    replica_id: int
    log_end_offset: int = -1
    log_start_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_ms: int = 0
    #: the broker epoch of its last fetch in this leadership (None: no fetch yet; -1: not said)
    broker_epoch: int | None = None

    def update(self, fetch_offset: int, log_start_offset: int, now_ms: int,
               leader_log_end_offset: int, broker_epoch: int = -1) -> None:
        """Kafka's ``updateFetchStateOrThrow``: a fetch from ``fetch_offset`` at ``now_ms`` by
        the broker in ``broker_epoch``."""
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_ms = now_ms
        self.broker_epoch = broker_epoch

    def reset(self, now_ms: int, leader_log_end_offset: int, in_sync: bool) -> None:
        """A new leadership: nothing is known of the follower yet; an ISR member counts as caught
        up now (it gets ``replica.lag.time.max.ms`` to show it is)."""
        self.log_end_offset = -1
        self.log_start_offset = -1
        self.last_caught_up_ms = now_ms if in_sync else 0
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_ms = 0
        self.broker_epoch = None


@dataclass
class _Waiter:
    required_offset: int
    required_acks_min_isr: int
    future: asyncio.Future[int]


@dataclass
class Partition:
    """A partition this broker holds a replica of (see the module docstring)."""

    topic: str
    index: int
    local_id: int
    log: PartitionLog
    alter_partition: AlterPartitionSender | None = None
    replica_lag_time_max_ms: int = 30_000
    #: told when the high watermark moves (wakes consumers' long polls on the partition)
    notify: Callable[[TopicPartition], None] | None = None
    #: brokers' registrations in the latest metadata (None: no metadata, every follower eligible)
    registration: RegistrationLookup | None = None
    #: this broker's own epoch (-1 before it registered), sent with its ISR proposals
    local_broker_epoch: Callable[[], int] = lambda: -1
    leader_id: int | None = None
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    followers: dict[int, FollowerState] = field(default_factory=dict)
    #: the ISR of a proposal in flight (None: none)
    pending_isr: tuple[int, ...] | None = None
    #: where the leader's current epoch began in its log
    leader_epoch_start_offset: int = -1
    _waiters: list[_Waiter] = field(default_factory=list)
    #: woken when a follower reports a higher log start offset or the leadership ends
    _log_start_watchers: list[asyncio.Future[None]] = field(default_factory=list)

    @property
    def tp(self) -> TopicPartition:
        return self.topic, self.index

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the high watermark must wait for: with an expansion in flight, the new member
        too (Kafka's ``maximalIsr``); with a shrink in flight, still the current members."""
        if self.pending_isr is None:
            return self.isr
        return tuple(sorted(set(self.isr) | set(self.pending_isr)))

    # -- transitions ---------------------------------------------------------------------------

    def make_leader(self, leader_epoch: int, partition_epoch: int, replicas: list[int],
                    isr: list[int], now_ms: int) -> bool:
        """Lead the partition in ``leader_epoch``; False if that is stale (an older epoch, or the
        same epoch and partition epoch already applied)."""
        if self.is_leader and (leader_epoch, partition_epoch) <= (self.leader_epoch, self.partition_epoch):
            return False
        new_leadership = not self.is_leader or leader_epoch != self.leader_epoch
        plog = self.log
        self.leader_id = self.local_id
        self.replicas, self.isr = tuple(replicas), tuple(isr)
        self.partition_epoch = partition_epoch
        self.pending_isr = None
        if new_leadership:
            self.leader_epoch = leader_epoch
            plog.leader_epoch = leader_epoch
            self.leader_epoch_start_offset = plog.log_end_offset
            cache = plog.leader_epoch_cache
            if cache.latest_epoch is None or cache.latest_epoch < leader_epoch:
                cache.assign(leader_epoch, plog.log_end_offset)
            if not plog.replicated:
                plog.set_high_watermark(_initial_high_watermark(plog))
        end = plog.log_end_offset
        followers = {}
        for replica in replicas:
            if replica == self.local_id:
                continue
            state = self.followers.get(replica)
            if state is None or new_leadership:
                state = FollowerState(replica)
                state.reset(now_ms, end, replica in isr)
            followers[replica] = state
        self.followers = followers
        self.maybe_increment_high_watermark()
        return True

    def make_follower(self, leader_id: int, leader_epoch: int, partition_epoch: int,
                      replicas: list[int]) -> bool:
        """Follow ``leader_id`` in ``leader_epoch``; False if stale. Appends waiting as leader
        are answered NOT_LEADER_OR_FOLLOWER."""
        if leader_epoch < self.leader_epoch or (
                leader_epoch == self.leader_epoch and partition_epoch <= self.partition_epoch
                and self.leader_id == leader_id):
            return False
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr = ()
        self.pending_isr = None
        self.followers = {}
        self.log.leader_epoch = leader_epoch
        if not self.log.replicated:
            self.log.set_high_watermark(_initial_high_watermark(self.log))
        self.fail_waiters(NotLeaderOrFollowerError(
            f"{self.topic}-{self.index}: leadership moved to {leader_id}"))
        return True

    def fail_waiters(self, error: KafkaError) -> None:
        self._wake_log_start_watchers()
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.future.done():
                waiter.future.set_exception(error)

    # -- leader: follower fetches --------------------------------------------------------------

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int,
                                    log_start_offset: int, now_ms: int,
                                    broker_epoch: int = -1) -> bool:
        """Record a follower's fetch (its broker in ``broker_epoch``, -1 when the fetch does not
        say); may propose an ISR expansion and move the high watermark (True when it moved).
        Raises NotLeaderOrFollowerError for a replica not assigned here, or for a fetch from an
        older incarnation of the broker than the registered one."""
        state = self.followers.get(replica_id)
        if state is None:
            raise NotLeaderOrFollowerError(
                f"{self.topic}-{self.index}: replica {replica_id} is not assigned to the partition")
        registered = self._alive_broker_epoch(replica_id)
        if broker_epoch != -1 and registered is not None and registered > broker_epoch:
            raise NotLeaderOrFollowerError(
                f"{self.topic}-{self.index}: stale fetch from replica {replica_id}: broker epoch"
                f" {broker_epoch}, registered {registered}")
        old_log_start = state.log_start_offset
        state.update(fetch_offset, log_start_offset, now_ms, self.log.log_end_offset, broker_epoch)
        if state.log_start_offset > old_log_start:
            self._wake_log_start_watchers()
        self._maybe_expand_isr(state)
        return self.maybe_increment_high_watermark()

    # -- leader: DeleteRecords' low watermark --------------------------------------------------

    def low_watermark(self, alive: Callable[[int], bool]) -> int:
        """Kafka's ``lowWatermarkIfLeader``: the smallest log start offset over this leader and
        its followers on alive brokers (a follower not heard from in this leadership counts as
        -1). DeleteRecords answers once it reaches the requested offset, so every live replica
        has dropped the deleted records before the client is told they are gone."""
        low = self.log.log_start_offset
        for state in self.followers.values():
            if alive(state.replica_id) and state.log_start_offset < low:
                low = state.log_start_offset
        return low

    async def log_start_moved(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` until a follower reports a higher log start offset or the
        leadership ends (returns either way; the caller checks what changed)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._log_start_watchers.append(future)
        try:
            await asyncio.wait_for(asyncio.shield(future), max(0.0, timeout_s))
        except TimeoutError:
            pass
        finally:
            if future in self._log_start_watchers:
                self._log_start_watchers.remove(future)

    def _wake_log_start_watchers(self) -> None:
        watchers, self._log_start_watchers = self._log_start_watchers, []
        for future in watchers:
            if not future.done():
                future.set_result(None)

    def _follower_in_sync(self, state: FollowerState) -> bool:
        end = state.log_end_offset
        return end >= self.log.high_watermark and end >= self.leader_epoch_start_offset >= 0

    def _alive_broker_epoch(self, replica_id: int) -> int | None:
        """The epoch of ``replica_id``'s registration if it is registered and unfenced."""
        if self.registration is None:
            return None
        registration = self.registration(replica_id)
        if registration is None or registration.fenced:
            return None
        return registration.epoch

    def replica_isr_eligible(self, replica_id: int) -> bool:
        """Whether ``replica_id`` may join the ISR (Kafka's ``isReplicaIsrEligible``): it has
        fetched in this leadership, its broker is registered, unfenced and not in controlled
        shutdown, and its fetches carried the registered broker epoch (or -1). Without
        metadata (no registrations known) every follower that fetched is eligible."""
        state = self.followers.get(replica_id)
        if state is None or state.broker_epoch is None:
            return False
        if self.registration is None:
            return True
        registration = self.registration(replica_id)
        if registration is None or registration.fenced or registration.in_controlled_shutdown:
            return False
        return state.broker_epoch in (-1, registration.epoch)

    def _maybe_expand_isr(self, state: FollowerState) -> None:
        if state.replica_id in self.isr or self.pending_isr is not None:
            return
        if self._follower_in_sync(state) and self.replica_isr_eligible(state.replica_id):
            self._propose(tuple(sorted({*self.isr, state.replica_id})))

    def out_of_sync_replicas(self, now_ms: int) -> list[int]:
        """ISR followers not caught up within ``replica.lag.time.max.ms`` (Kafka's
        ``isCaughtUp``: a follower that has the whole log stays in sync however long ago it
        fetched, so an idle partition keeps its ISR)."""
        limit = self.replica_lag_time_max_ms
        end = self.log.log_end_offset
        lagging = []
        for replica in self.isr:
            state = self.followers.get(replica)
            if replica == self.local_id or state is None or state.log_end_offset == end:
                continue
            if now_ms - state.last_caught_up_ms > limit:
                lagging.append(replica)
        return sorted(lagging)

    def maybe_shrink_isr(self, now_ms: int) -> tuple[int, ...] | None:
        """Propose removing the out-of-sync followers; the proposed ISR, or None."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        lagging = self.out_of_sync_replicas(now_ms)
        if not lagging:
            return None
        new_isr = tuple(r for r in self.isr if r not in lagging)
        log.info("%s-%d: shrinking the ISR from %s to %s (not caught up within %d ms)",
                 self.topic, self.index, self.isr, new_isr, self.replica_lag_time_max_ms)
        self._propose(new_isr)
        return new_isr

    def _propose(self, new_isr: tuple[int, ...]) -> None:
        sender = self.alter_partition
        if sender is None:
            return
        proposal = IsrProposal(self.topic, self.index, self.local_id, self.leader_epoch,
                               self.partition_epoch, new_isr,
                               tuple(self._broker_epoch_of(r) for r in new_isr))
        self.pending_isr = new_isr
        asyncio.get_running_loop().create_task(self._send_proposal(sender, proposal))

    def _broker_epoch_of(self, replica_id: int) -> int:
        """The broker epoch a proposal carries for ``replica_id`` (Kafka's
        ``addBrokerEpochToIsr``): this broker's own, a follower's from its last fetch, -1 for a
        member not heard from in this leadership (it stays as the controller has it)."""
        if replica_id == self.local_id:
            return self.local_broker_epoch()
        state = self.followers.get(replica_id)
        if state is None or state.broker_epoch is None:
            return -1
        return state.broker_epoch

    async def _send_proposal(self, sender: AlterPartitionSender, proposal: IsrProposal) -> None:
        try:
            committed = await sender(proposal)
        except Exception as exc:  # refused or unreachable: new metadata or a later proposal fixes it
            log.info("%s-%d: ISR change to %s not committed: %s",
                     self.topic, self.index, proposal.isr, exc)
            if self.pending_isr == proposal.isr and self.leader_epoch == proposal.leader_epoch:
                self.pending_isr = None
            return
        self.apply_committed_isr(proposal, committed)

    def apply_committed_isr(self, proposal: IsrProposal, committed: IsrCommitted) -> None:
        """The controller committed an ISR change: adopt it if it is still this leadership's."""
        if self.pending_isr == proposal.isr:
            self.pending_isr = None
        if (not self.is_leader or committed.leader_epoch != self.leader_epoch
                or committed.partition_epoch <= self.partition_epoch):
            return
        self.isr = committed.isr
        self.partition_epoch = committed.partition_epoch
        self.maybe_increment_high_watermark()
        self._answer_waiters()

    # -- leader: fetch from the closest replica (KIP-392) ---------------------------------------

    def preferred_read_replica(self, client_rack: str, fetch_offset: int, now_ms: int,
                               rack_of: Callable[[int], str | None]) -> int:
        """Kafka's ``RackAwareReplicaSelector``: the replica a consumer in ``client_rack`` should
        fetch from, or -1 for this leader (no rack, the leader in the client's rack, or no
        caught-up replica there that has ``fetch_offset``). Among several, the one with the
        longest log."""
        if not client_rack or rack_of(self.local_id) == client_rack:
            return -1
        end = self.log.log_end_offset
        best, best_end = -1, -1
        for replica in self.replicas:
            state = self.followers.get(replica)
            if replica == self.local_id or state is None or rack_of(replica) != client_rack:
                continue
            caught_up = (state.log_end_offset == end
                         or now_ms - state.last_caught_up_ms <= self.replica_lag_time_max_ms)
            has_offset = state.log_start_offset <= fetch_offset < state.log_end_offset
            if caught_up and has_offset and state.log_end_offset > best_end:
                best, best_end = replica, state.log_end_offset
        return best

    # -- leader: high watermark and acks=all ---------------------------------------------------

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark to the smallest log end offset over the leader and the
        maximal ISR, if that is higher; answers the appends it covers."""
        if not self.is_leader:
            return False
        plog = self.log
        new_hw = plog.log_end_offset
        for replica in self.maximal_isr:
            if replica == self.local_id:
                continue
            state = self.followers.get(replica)
            end = state.log_end_offset if state is not None else -1
            if end < new_hw:
                new_hw = end
        if new_hw <= plog.high_watermark:
            return False
        plog.set_high_watermark(new_hw)
        self._answer_waiters()
        if self.notify is not None:
            self.notify(self.tp)
        return True

    def effective_min_isr(self, min_insync_replicas: int) -> int:
        """``min.insync.replicas`` capped at the replica count, as Kafka's ``effectiveMinIsr``: a
        topic with fewer replicas than the setting is not refused for ever."""
        return min(min_insync_replicas, len(self.replicas))

    def check_enough_replicas(self, min_insync_replicas: int) -> None:
        """acks=all before appending: NOT_ENOUGH_REPLICAS when the ISR is too small."""
        min_insync_replicas = self.effective_min_isr(min_insync_replicas)
        if len(self.isr) < min_insync_replicas:
            raise NotEnoughReplicasError(
                f"The size of the current ISR {list(self.isr)} is insufficient to satisfy the"
                f" min.isr requirement of {min_insync_replicas} for partition"
                f" {self.topic}-{self.index}")

    async def wait_for_high_watermark(self, required_offset: int, min_insync_replicas: int,
                                      timeout_s: float) -> None:
        """acks=all after appending: wait until the high watermark reaches ``required_offset``
        (one past the append's last offset). Raises NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR
        is below ``min_insync_replicas`` by then, REQUEST_TIMED_OUT on timeout,
        NOT_LEADER_OR_FOLLOWER if leadership moves."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"{self.topic}-{self.index}: not the leader")
        min_insync_replicas = self.effective_min_isr(min_insync_replicas)
        if self.log.high_watermark < required_offset:
            future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            waiter = _Waiter(required_offset, min_insync_replicas, future)
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(asyncio.shield(future), timeout_s)
            except TimeoutError:
                raise RequestTimedOutError(
                    f"{self.topic}-{self.index}: the high watermark did not reach"
                    f" {required_offset} in time") from None
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        if len(self.isr) < min_insync_replicas:
            raise NotEnoughReplicasAfterAppendError(
                f"The size of the current ISR {list(self.isr)} is insufficient to satisfy the"
                f" min.isr requirement of {min_insync_replicas} for partition"
                f" {self.topic}-{self.index}")

    def _answer_waiters(self) -> None:
        hw = self.log.high_watermark
        remaining = []
        for waiter in self._waiters:
            if waiter.required_offset <= hw:
                if not waiter.future.done():
                    waiter.future.set_result(hw)
            else:
                remaining.append(waiter)
        self._waiters = remaining


def _initial_high_watermark(plog: PartitionLog) -> int:
    """Where a replica's high watermark starts: the checkpointed one, else the log start (nothing
    is known to be committed; the leader's ISR or fetch responses move it up)."""
    hw = plog.checkpointed_high_watermark
    return plog.log_start_offset if hw is None else hw
