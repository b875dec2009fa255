"""The classic group coordinator: Kafka's ``GroupCoordinator`` rebalance protocol (membership, as
Kafka's ``GroupMetadataManager``), with the committed offsets in ``offsets.GroupOffsets`` (Kafka's
``OffsetMetadataManager``), which this class fronts for the handlers.

Everything here runs on the broker's event loop and never blocks: requests that must wait (JoinGroup
until the join window closes, SyncGroup until the leader's assignment arrives) pass a callback that
is called with their answer later. Time comes from a ``Clock``, so the tests drive session
timeouts and rebalance windows with ``ManualClock`` and no sockets.

State changes that must survive a restart (committed offsets, the group after each completed
rebalance, a static member's new member id) are written through a ``GroupStore`` as Kafka's
``__consumer_offsets`` records before they take effect, and read back by ``load_records``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from reference_broker.clock import Clock
from reference_broker.coordinator.group import consumer_records, records
from reference_broker.coordinator.group.consumer_coordinator import ConsumerGroupCoordinator
from reference_broker.coordinator.group.offsets import GroupOffsets
from reference_broker.coordinator.group.state import (
    CommittedOffset,
    Group,
    GroupState,
    JoinCallback,
    JoinResult,
    Member,
    SyncCallback,
    SyncResult,
)
from reference_broker.coordinator.write_errors import write_error_code
from sdk.protocol.errors import ErrorCode

log = logging.getLogger("reference_broker.group_coordinator")

E = ErrorCode
#: Record written to ``__consumer_offsets``: (key, value or None for a tombstone).
Record = tuple[bytes, bytes | None]


class GroupStore(Protocol):
    """Where the coordinator's records go: one ``__consumer_offsets`` partition per group."""

    def write(self, partition: int, batch: list[Record]) -> None:
        """Append ``batch`` atomically; raises on failure (nothing is then applied)."""

    def write_transactional(
        self, partition: int, batch: list[Record], producer_id: int, producer_epoch: int
    ) -> None:
        """Append ``batch`` as one transactional batch of ``producer_id`` (TxnOffsetCommit)."""


@dataclasses.dataclass(frozen=True)
class GroupConfig:
    """The broker settings the coordinator obeys (Kafka's names in ``reference_broker.config``)."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_group_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3_600_000
    num_partitions: int = 50


@dataclasses.dataclass(frozen=True)
class JoiningMember:
    """What a JoinGroup request says about its member."""

    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]


@dataclasses.dataclass
class LeaveOutcome:
    member_id: str
    group_instance_id: str | None
    error: int


class GroupCoordinator:
    """Every classic group of this broker."""

    def __init__(
        self,
        clock: Clock,
        config: GroupConfig,
        store: GroupStore | None = None,
        topic_exists: Callable[[str, int], bool] | None = None,
    ):
        self.clock = clock
        self.config = config
        self.store = store
        self.topic_exists = topic_exists or (lambda topic, partition: True)
        self.groups: dict[str, Group] = {}
        #: ``__consumer_offsets`` partitions whose records are still being read at start-up.
        self.loading: set[int] = set()
        #: Cluster mode: the ``__consumer_offsets`` partitions this node leads, so coordinates;
        #: None on a single node, which coordinates every group.
        self.owned: set[int] | None = None
        #: Cluster mode: ``(partition, apply)`` runs a change of the offsets once its records are
        #: committed to the ISR, in log order (``CommittedWrites.after_commit``), or with an offset,
        #: once the partition is committed up to it; None applies at once.
        self.apply_when_committed: Callable[[int, Callable[[], None], int | None], None] | None = None
        #: Cluster mode: ``(partition, committed, failed)`` calls ``committed`` once the records
        #: just written are committed, else ``failed`` with the client's error code (Kafka's
        #: append future of a write); None: a write that was stored is committed at once.
        self.outcome_when_committed: (
            Callable[[int, Callable[[], None], Callable[[int], None]], None] | None
        ) = None
        #: Cluster mode: ``(partition)`` waits until everything written to the partition so far
        #: is committed, then 0, else the error code (``CommittedWrites.wait``: NOT_COORDINATOR,
        #: COORDINATOR_NOT_AVAILABLE); None: every stored write is committed already.
        self.until_committed: Callable[[int], Awaitable[int]] | None = None
        self.offsets = GroupOffsets(self)
        #: The KIP-848 consumer groups; their offsets stay in ``groups`` (a ``Group`` without members).
        self.consumer = ConsumerGroupCoordinator(self)

    # -- helpers -------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return records.partition_for(group_id, self.config.num_partitions)

    def is_loading(self, group_id: str) -> bool:
        return bool(self.loading) and self.partition_for(group_id) in self.loading

    def unavailable(self, group_id: str) -> int:
        """Why this node cannot serve ``group_id`` now: NOT_COORDINATOR when another node leads
        its ``__consumer_offsets`` partition (cluster mode), COORDINATOR_LOAD_IN_PROGRESS while the
        partition is being read; 0 when it can."""
        partition = self.partition_for(group_id)
        if self.owned is not None and partition not in self.owned:
            return E.NOT_COORDINATOR
        if self.loading and partition in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return 0

    def write_records(self, group_id: str, batch: list[Record]) -> int:
        """Persist ``batch`` for ``group_id``; an error code (0 when stored). Its consumer group
        records reach the committed view of consumer groups once committed (``consumer_views``):
        every consumer group change is written here, so this is the view's one feed."""
        if not batch:
            return 0
        partition = self.partition_for(group_id)
        if self.store is not None:
            try:
                self.store.write(partition, batch)
            except Exception as exc:
                code = write_error_code(exc)
                log.warning("writing group %s to __consumer_offsets failed (answered %s): %s",
                            group_id, E(code).name, exc)
                return code
        consumer_batch = [r for r in batch if consumer_records.is_consumer_group_key(r[0])]
        if consumer_batch:
            self.on_committed(partition, lambda: self.consumer.committed.apply(consumer_batch))
        return 0

    def on_committed(self, partition: int, apply: Callable[[], None], up_to: int | None = None) -> None:
        """Apply a change of the offsets of ``__consumer_offsets`` partition ``partition`` once
        what was written for it is committed (at once on a single node), so OffsetFetch never
        shows an offset the partition's next leader could lack; ``up_to``: once the partition
        is committed up to that offset (records a load read past the high watermark)."""
        if self.apply_when_committed is None:
            apply()
        else:
            self.apply_when_committed(partition, apply, up_to)

    def after_write(
        self, group_id: str, committed: Callable[[], None], failed: Callable[[int], None]
    ) -> None:
        """``committed`` once what was just written for ``group_id`` is committed (at once on a
        single node), else ``failed`` with the client's error code: the committed-write path
        alone decides what a write's outcome changes."""
        if self.outcome_when_committed is None:
            committed()
        else:
            self.outcome_when_committed(self.partition_for(group_id), committed, failed)

    def _group_record(self, group: Group, assignments: dict[str, bytes] | None = None) -> Record:
        """The group's metadata record; with ``assignments``, those instead of the members' own
        (a SyncGroup's assignment is written before the members hold it)."""
        value = records.GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=group.state_timestamp_ms,
            members=[
                records.GroupMetadataValue.MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata_for(group.protocol_name) if group.protocol_name else b"",
                    assignment=m.assignment if assignments is None else assignments.get(m.member_id, b""),
                )
                for m in group.members.values()
            ],
        )
        return records.group_key(group.group_id), records.group_value(value)

    def _store_group(self, group: Group) -> int:
        return self.write_records(group.group_id, [self._group_record(group)])

    def _new_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        return f"{group_instance_id or client_id}-{uuid.uuid4()}"

    # -- heartbeats and session expiry ---------------------------------------------------

    def schedule_heartbeat(self, group: Group, member: Member) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        member.heartbeat_timer = self.clock.call_later(
            member.session_timeout_ms, lambda: self._heartbeat_expired(group, member)
        )

    def _heartbeat_expired(self, group: Group, member: Member) -> None:
        member.heartbeat_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting_join or member.awaiting_sync:
            # A request of this member is in flight: it is alive (Kafka's hasSatisfiedHeartbeat).
            self.schedule_heartbeat(group, member)
            return
        log.info("member %s of group %s expired (session timeout)", member.member_id, group.group_id)
        self._remove_member_and_update(group, member)

    def _schedule_pending_expiry(self, group: Group, member_id: str, session_timeout_ms: int) -> None:
        def expire() -> None:
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                if group.is_(GroupState.PREPARING_REBALANCE):
                    self._try_complete_join(group)

        self.clock.call_later(session_timeout_ms, expire)

    # -- JoinGroup -----------------------------------------------------------------------

    def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        respond: JoinCallback,
    ) -> None:
        """Kafka's ``handleJoinGroup``: answered through ``respond``, now or when the join window closes."""
        if not group_id:
            return respond(JoinResult(E.INVALID_GROUP_ID, member_id))
        if unavailable := self.unavailable(group_id):
            return respond(JoinResult(unavailable, member_id))
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return respond(JoinResult(E.INVALID_SESSION_TIMEOUT, member_id))
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        consumer_group = self.consumer.groups.get(group_id)
        # A consumer group with members takes the classic member in (Kafka's mixed groups); an
        # empty one is deleted and the group becomes classic, as in Kafka.
        if consumer_group is not None and consumer_group.members:
            return respond(
                self.consumer.classic.join(
                    consumer_group,
                    member_id,
                    group_instance_id,
                    require_known_member_id,
                    client_id,
                    client_host,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    protocol_type,
                    protocols,
                )
            )
        if consumer_group is not None and self.consumer.delete_group(consumer_group):
            return respond(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id))
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return respond(JoinResult(E.UNKNOWN_MEMBER_ID, member_id))
            group = self.groups[group_id] = Group(group_id, self.clock.now_ms())
        if group.is_(GroupState.DEAD):
            return respond(JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id))
        if not self._accepts_joining_member(group, member_id):
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member_and_update(group, member)
            return respond(JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id))
        if not group.supports(protocol_type, protocols):
            return respond(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id))
        member_args = JoiningMember(
            client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols
        )
        if not member_id:
            self._join_unknown(group, group_instance_id, require_known_member_id, member_args, respond)
        else:
            self._join_known(group, member_id, group_instance_id, member_args, respond)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)
        return None

    def _accepts_joining_member(self, group: Group, member_id: str) -> bool:
        """Kafka's ``acceptJoiningMember`` (``group.max.size``): an Empty group takes anyone; one
        preparing a rebalance takes a member whose join is already waiting, or anyone while fewer
        than the maximum joins wait; otherwise a member or anyone while there is room."""
        max_size = self.config.max_group_size
        if group.is_(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_(GroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            if member is not None and member.awaiting_join:
                return True
            return group.awaiting_join_count(max_size) < max_size
        return member_id in group.members or len(group.members) < max_size

    def _join_unknown(
        self,
        group: Group,
        group_instance_id: str | None,
        require_known_member_id: bool,
        member_args: JoiningMember,
        respond: JoinCallback,
    ) -> None:
        client_id, session_timeout_ms = member_args.client_id, member_args.session_timeout_ms
        new_id = self._new_member_id(client_id, group_instance_id)
        if group_instance_id is not None and group_instance_id in group.static_members:
            self._replace_static_member(group, group_instance_id, new_id, member_args, respond)
        elif group_instance_id is None and require_known_member_id:
            group.pending_members.add(new_id)
            self._schedule_pending_expiry(group, new_id, session_timeout_ms)
            respond(JoinResult(E.MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_and_rebalance(group, new_id, group_instance_id, member_args, respond)

    def _join_known(
        self,
        group: Group,
        member_id: str,
        group_instance_id: str | None,
        member_args: JoiningMember,
        respond: JoinCallback,
    ) -> None:
        if group.is_static_member_fenced(group_instance_id, member_id):
            return respond(JoinResult(E.FENCED_INSTANCE_ID, member_id))
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            return self._add_member_and_rebalance(group, member_id, group_instance_id, member_args, respond)
        member = group.members.get(member_id)
        if member is None or group.is_(GroupState.EMPTY, GroupState.DEAD):
            return respond(JoinResult(E.UNKNOWN_MEMBER_ID, member_id))
        if member.group_instance_id != group_instance_id and group_instance_id is not None:
            return respond(JoinResult(E.FENCED_INSTANCE_ID, member_id))
        protocols = member_args.protocols
        if group.is_(GroupState.PREPARING_REBALANCE):
            return self._update_member_and_rebalance(group, member, member_args, respond)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            if member.matches(protocols):
                # The join response was lost: answer it again (Kafka does the same).
                return respond(self._join_result(group, member))
            return self._update_member_and_rebalance(group, member, member_args, respond)
        # Stable
        if group.leader_id == member_id or not member.matches(protocols):
            return self._update_member_and_rebalance(group, member, member_args, respond)
        self.schedule_heartbeat(group, member)
        return respond(self._join_result(group, member))

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        is_leader = group.leader_id == member.member_id
        return JoinResult(
            0,
            member.member_id,
            group.generation,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            members=self._member_list(group) if is_leader else [],
        )

    def _member_list(self, group: Group) -> list[tuple[str, str | None, bytes]]:
        assert group.protocol_name is not None
        return [
            (m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
            for m in group.members.values()
        ]

    def _add_member_and_rebalance(
        self,
        group: Group,
        member_id: str,
        group_instance_id: str | None,
        member_args: JoiningMember,
        respond: JoinCallback,
    ) -> None:
        member = Member(
            member_id,
            group_instance_id,
            member_args.client_id,
            member_args.client_host,
            member_args.rebalance_timeout_ms,
            member_args.session_timeout_ms,
            member_args.protocol_type,
            list(member_args.protocols),
            join_callback=respond,
            is_new=True,
        )
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation == 0:
            group.new_member_added = True
        group.add(member)
        self.schedule_heartbeat(group, member)
        self._maybe_prepare_rebalance(group, f"adding member {member_id}")

    def _update_member_and_rebalance(
        self, group: Group, member: Member, member_args: JoiningMember, respond: JoinCallback
    ) -> None:
        rebalance_ms, session_ms = member_args.rebalance_timeout_ms, member_args.session_timeout_ms
        protocols = member_args.protocols
        member.rebalance_timeout_ms = rebalance_ms
        member.session_timeout_ms = session_ms
        group.set_protocols(member, protocols)
        member.join_callback = respond
        self.schedule_heartbeat(group, member)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoining")

    def _replace_static_member(
        self, group: Group, instance_id: str, new_id: str, member_args: JoiningMember, respond: JoinCallback
    ) -> None:
        """A static member restarted: it takes a new member id and keeps its assignment (KIP-345);
        the old id is fenced. In a Stable group whose protocol choice it does not change, no
        rebalance happens (Kafka's ``updateStaticMemberAndRebalance``)."""
        old_id = group.static_members[instance_id]
        old = group.members.pop(old_id)
        group.count_protocols(old, -1)
        old_leader = group.leader_id
        if old.heartbeat_timer is not None:
            old.heartbeat_timer.cancel()
        if old.join_callback is not None:
            callback, old.join_callback = old.join_callback, None
            callback(JoinResult(E.FENCED_INSTANCE_ID, old_id))
        if old.sync_callback is not None:
            callback_sync, old.sync_callback = old.sync_callback, None
            callback_sync(SyncResult(E.FENCED_INSTANCE_ID))
        rebalance_ms, session_ms = member_args.rebalance_timeout_ms, member_args.session_timeout_ms
        protocols = member_args.protocols
        member = dataclasses.replace(
            old,
            member_id=new_id,
            rebalance_timeout_ms=rebalance_ms,
            session_timeout_ms=session_ms,
            protocols=list(protocols),
            join_callback=respond,
            sync_callback=None,
            heartbeat_timer=None,
        )
        group.members[new_id] = member
        group.count_protocols(member, 1)
        group.static_members[instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        self.schedule_heartbeat(group, member)
        if group.is_(GroupState.STABLE):
            if (
                group.protocol_name in group.candidate_protocols()
                and group.select_protocol() == group.protocol_name
            ):
                error = self._store_group(group)
                if error:
                    # Undo: the old member id stays the member.
                    del group.members[new_id]
                    group.members[old_id] = dataclasses.replace(member, member_id=old_id, join_callback=None)
                    group.count_protocols(member, -1)
                    group.count_protocols(group.members[old_id], 1)
                    group.static_members[instance_id] = old_id
                    group.leader_id = old_leader
                    member.join_callback = None
                    return respond(JoinResult(error, ""))
                is_leader = group.leader_id == new_id
                member.join_callback = None
                return respond(
                    JoinResult(
                        0,
                        new_id,
                        group.generation,
                        group.protocol_type,
                        group.protocol_name,
                        old_leader or "",
                        skip_assignment=is_leader,
                        members=self._member_list(group) if is_leader else [],
                    )
                )
            return self._maybe_prepare_rebalance(group, f"static member {instance_id} changed protocols")
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return self._prepare_rebalance(group, f"static member {instance_id} replaced during sync")
        return None  # PreparingRebalance: it waits for the join like everyone else

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        log.info("preparing rebalance of group %s: %s", group.group_id, reason)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_sync(group, E.REBALANCE_IN_PROGRESS)
        was_empty = group.is_(GroupState.EMPTY)
        group.transition(GroupState.PREPARING_REBALANCE, self.clock.now_ms())
        group.start_join_window()
        if group.join_timer is not None:
            group.join_timer.cancel()
        rebalance_ms = group.max_rebalance_timeout_ms()
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            delay = self.config.initial_rebalance_delay_ms
            self._initial_delayed_join(group, delay, max(rebalance_ms - delay, 0))
        else:
            group.join_timer = self.clock.call_later(rebalance_ms, lambda: self._complete_join(group))
            self._try_complete_join(group)  # Kafka's tryCompleteElseWatch: maybe everyone is in

    def _initial_delayed_join(self, group: Group, delay_ms: int, remaining_ms: int) -> None:
        """Kafka's ``InitialDelayedJoin``: wait ``delay_ms`` and again while new members keep
        arriving, at most the rebalance timeout in all."""

        def expired() -> None:
            group.join_timer = None
            if group.new_member_added and remaining_ms > 0:
                group.new_member_added = False
                step = min(delay_ms, remaining_ms)
                self._initial_delayed_join(group, step, max(remaining_ms - step, 0))
            else:
                self._complete_join(group)

        group.new_member_added = False
        group.join_timer = self.clock.call_later(delay_ms, expired)
        group.initial_delay_active = True

    def _try_complete_join(self, group: Group) -> None:
        if group.initial_delay_active and group.join_timer is not None:
            return  # the initial delay is not cut short
        if group.all_members_joined():
            if group.join_timer is not None:
                group.join_timer.cancel()
                group.join_timer = None
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """The join window closed: members that did not rejoin are dropped, the next generation
        starts, the leader gets the members' metadata (Kafka's ``onCompleteJoin``)."""
        group.initial_delay_active = False
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        for member in [m for m in group.members.values() if not m.awaiting_join]:
            log.info("member %s of group %s did not rejoin in time", member.member_id, group.group_id)
            if member.heartbeat_timer is not None:
                member.heartbeat_timer.cancel()
            group.remove(member.member_id)
        group.pending_members.clear()
        group.generation += 1
        if group.empty:
            group.protocol_name = None
            group.transition(GroupState.EMPTY, self.clock.now_ms())
            self._store_group(group)
            return
        group.protocol_name = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE, self.clock.now_ms())
        group.pending_sync = set(group.members)
        generation = group.generation
        self.clock.call_later(
            group.max_rebalance_timeout_ms(), lambda: self._pending_sync_expired(group, generation)
        )
        for member in group.members.values():
            callback, member.join_callback = member.join_callback, None
            member.is_new = False
            self.schedule_heartbeat(group, member)
            if callback is not None:
                callback(self._join_result(group, member))

    def _pending_sync_expired(self, group: Group, generation: int) -> None:
        """Members that got their JoinGroup answer but sent no SyncGroup within the rebalance
        timeout are removed and the group rebalances (Kafka's pending-sync expiry, KAFKA-13419)."""
        if group.generation != generation or not group.is_(
            GroupState.COMPLETING_REBALANCE, GroupState.STABLE
        ):
            return
        missing = [group.members[m] for m in group.pending_sync if m in group.members]
        group.pending_sync.clear()
        for member in missing:
            log.info("member %s of group %s sent no SyncGroup in time", member.member_id, group.group_id)
            self._remove_member_and_update(group, member)

    def _reset_and_propagate_sync(self, group: Group, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.sync_callback is not None:
                callback, member.sync_callback = member.sync_callback, None
                callback(SyncResult(error))

    # -- SyncGroup -----------------------------------------------------------------------

    def sync_group(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        respond: SyncCallback,
    ) -> None:
        if unavailable := self.unavailable(group_id):
            return respond(SyncResult(unavailable))
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            return respond(
                self.consumer.classic.sync(
                    consumer_group, generation, member_id, group_instance_id, protocol_type, protocol_name
                )
            )
        group = self.groups.get(group_id)
        if group is None:
            return respond(SyncResult(E.UNKNOWN_MEMBER_ID))
        if group.is_(GroupState.DEAD):
            return respond(SyncResult(E.COORDINATOR_NOT_AVAILABLE))
        if group.is_static_member_fenced(group_instance_id, member_id):
            return respond(SyncResult(E.FENCED_INSTANCE_ID))
        member = group.members.get(member_id)
        if member is None:
            return respond(SyncResult(E.UNKNOWN_MEMBER_ID))
        if generation != group.generation:
            return respond(SyncResult(E.ILLEGAL_GENERATION))
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return respond(SyncResult(E.INCONSISTENT_GROUP_PROTOCOL))
        if group.is_(GroupState.EMPTY):
            return respond(SyncResult(E.UNKNOWN_MEMBER_ID))
        if group.is_(GroupState.PREPARING_REBALANCE):
            return respond(SyncResult(E.REBALANCE_IN_PROGRESS))
        self.schedule_heartbeat(group, member)
        group.pending_sync.discard(member_id)
        if group.is_(GroupState.STABLE):
            return respond(self._sync_result(group, member))
        # CompletingRebalance: wait for the leader's assignment.
        member.sync_callback = respond
        if member_id == group.leader_id:
            assignment = {m: assignments.get(m, b"") for m in group.members}
            error = self.write_records(group_id, [self._group_record(group, assignment)])
            if error:
                self._assignment_not_stored(group, error)
                return None
            self.after_write(
                group_id,
                lambda: self._assignment_stored(group, generation, assignment),
                lambda code: self._assignment_stored(group, generation, assignment, code),
            )
        return None

    def _assignment_stored(
        self, group: Group, generation: int, assignment: dict[str, bytes], error: int = 0
    ) -> None:
        """The leader's assignment record is committed (``error`` 0) or failed: only then do the
        members get it and the group become Stable, or the members get ``error`` and rejoin
        (Kafka's SyncGroup append future); nothing when the group moved on meanwhile (a new
        generation, another state, or dropped from this node)."""
        if self.groups.get(group.group_id) is not group or not group.is_(GroupState.COMPLETING_REBALANCE):
            return
        if group.generation != generation:
            return
        if error:
            self._assignment_not_stored(group, error)
            return
        for m in group.members.values():
            m.assignment = assignment.get(m.member_id, b"")
        group.transition(GroupState.STABLE, self.clock.now_ms())
        for m in group.members.values():
            if m.sync_callback is not None:
                callback, m.sync_callback = m.sync_callback, None
                callback(self._sync_result(group, m))

    def _assignment_not_stored(self, group: Group, error: int) -> None:
        log.info("storing the assignment of group %s failed: %s", group.group_id, E(error).name)
        self._reset_and_propagate_sync(group, error)
        self._prepare_rebalance(group, "storing the assignment failed")

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncResult:
        return SyncResult(0, group.protocol_type, group.protocol_name, member.assignment)

    # -- Heartbeat and LeaveGroup --------------------------------------------------------

    def heartbeat(self, group_id: str, generation: int, member_id: str, group_instance_id: str | None) -> int:
        if unavailable := self.unavailable(group_id):
            return unavailable
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            return self.consumer.classic.heartbeat(consumer_group, generation, member_id, group_instance_id)
        group = self.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(group_instance_id, member_id):
            return E.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return E.ILLEGAL_GENERATION
        if group.is_(GroupState.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        self.schedule_heartbeat(group, member)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return 0

    def leave_group(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[int, list[LeaveOutcome]]:
        """Members leave, by member id or (static members) by instance id: (top-level error,
        one outcome per member)."""
        if unavailable := self.unavailable(group_id):
            return unavailable, []
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            left = []
            for member_id, instance_id in leaving:
                found_id, error = self.consumer.classic.leave(consumer_group, member_id, instance_id)
                left.append(LeaveOutcome(found_id, instance_id, error))
            return E.NONE, left
        group = self.groups.get(group_id)
        if group is None:
            return E.NONE, [LeaveOutcome(m, i, E.UNKNOWN_MEMBER_ID) for m, i in leaving]
        if group.is_(GroupState.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        outcomes = []
        for member_id, instance_id in leaving:
            outcomes.append(
                LeaveOutcome(member_id, instance_id, self._leave_one(group, member_id, instance_id))
            )
        return E.NONE, outcomes

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            if member_id and member_id != current:
                return E.FENCED_INSTANCE_ID
            member_id = current
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._try_complete_join(group)
            return 0
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        log.info("member %s leaves group %s", member_id, group.group_id)
        self._remove_member_and_update(group, member)
        return 0

    @staticmethod
    def _release(member: Member, code: int) -> None:
        """Stop the member's heartbeat timer and answer its waiting JoinGroup and SyncGroup with
        ``code``: the member is leaving the group."""
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None
        if member.join_callback is not None:
            join_callback, member.join_callback = member.join_callback, None
            join_callback(JoinResult(code, member.member_id))
        if member.sync_callback is not None:
            sync_callback, member.sync_callback = member.sync_callback, None
            sync_callback(SyncResult(code))

    def _remove_member_and_update(self, group: Group, member: Member) -> None:
        self._release(member, E.UNKNOWN_MEMBER_ID)
        group.remove(member.member_id)
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"member {member.member_id} left")
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def retire_classic_members(self, group: Group) -> None:
        """The classic group became a consumer group (its members now belong to it): waiting joins
        and syncs are told to rejoin, timers stop, and a member-less group keeps the offsets."""
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.generation += 1  # outdates a pending-sync expiry already scheduled
        group.pending_sync.clear()
        group.pending_members.clear()
        for member in list(group.members.values()):
            self._release(member, E.REBALANCE_IN_PROGRESS)
            group.remove(member.member_id)
        holder = Group(group.group_id, self.clock.now_ms())
        holder.offsets = group.offsets
        holder.pending_transactional_offsets = group.pending_transactional_offsets
        self.groups[group.group_id] = holder

    def adopt_downgraded(self, group: Group, batch: list[Record], *, rebalance: bool = True) -> int:
        """A consumer group whose members all speak the classic protocol becomes the classic
        ``group`` (Stable at the consumer group's epoch, each member holding its target
        assignment), written with ``batch`` (the consumer group's tombstones), then (``rebalance``)
        rebalanced so the members rejoin it: 0, or the error that kept it a consumer group."""
        error = self.write_records(group.group_id, [*batch, self._group_record(group)])
        if error:
            return error
        holder = self.groups.get(group.group_id)
        if holder is not None:
            group.offsets = holder.offsets
            group.pending_transactional_offsets = holder.pending_transactional_offsets
        self.groups[group.group_id] = group
        for member in group.members.values():
            self.schedule_heartbeat(group, member)
        if rebalance:
            self._prepare_rebalance(group, f"downgrade of group {group.group_id} from consumer to classic")
        return 0

    # -- offsets (``offsets.GroupOffsets``) ---------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], CommittedOffset],
        *,
        api_version: int = 8,
    ) -> dict[tuple[str, int], int]:
        """OffsetCommit: an error code per partition (``GroupOffsets.commit_offsets``)."""
        return self.offsets.commit_offsets(
            group_id, generation, member_id, group_instance_id, offsets, api_version=api_version
        )

    def commit_transactional_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], CommittedOffset],
    ) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit: pending until the marker (``GroupOffsets.commit_transactional_offsets``)."""
        return self.offsets.commit_transactional_offsets(
            group_id, producer_id, producer_epoch, generation, member_id, group_instance_id, offsets
        )

    def complete_transactional_offsets(self, partition: int, producer_id: int, commit: bool) -> None:
        """A marker on ``__consumer_offsets`` partition ``partition`` publishes or drops the
        producer's pending offsets there."""
        self.offsets.complete_transactional_offsets(partition, producer_id, commit)

    def load_transactional_offsets(self, pending: dict[int, list[Record]]) -> None:
        self.offsets.load_transactional_offsets(pending)

    def fetch_offsets(
        self,
        group_id: str,
        partitions: list[tuple[str, int]] | None,
        require_stable: bool = False,
        member: tuple[str | None, int] = (None, -1),
    ) -> tuple[int, dict[tuple[str, int], tuple[CommittedOffset | None, int]]]:
        """OffsetFetch (``GroupOffsets.fetch_offsets``)."""
        return self.offsets.fetch_offsets(group_id, partitions, require_stable, member)

    async def fetch_stable_offsets(
        self,
        group_id: str,
        partitions: list[tuple[str, int]] | None,
        member: tuple[str | None, int] = (None, -1),
    ) -> tuple[int, dict[tuple[str, int], tuple[CommittedOffset | None, int]]]:
        """OffsetFetch with ``require_stable`` (``GroupOffsets.fetch_stable_offsets``)."""
        return await self.offsets.fetch_stable_offsets(group_id, partitions, member)

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete (``GroupOffsets.delete_offsets``)."""
        return self.offsets.delete_offsets(group_id, partitions)

    def expire_offsets(self) -> int:
        """Offset retention, the periodic task (``GroupOffsets.expire_offsets``)."""
        return self.offsets.expire_offsets()

    # -- admin ---------------------------------------------------------------------------

    def list_groups(self) -> list[Group]:
        """The classic groups (a consumer group's offsets holder is listed by ``consumer.groups``)."""
        listed = [g for g in self.groups.values() if g.group_id not in self.consumer.groups]
        return [g for g in listed if not g.is_(GroupState.DEAD)]

    def describe_group(self, group_id: str) -> tuple[int, Group | None]:
        if unavailable := self.unavailable(group_id):
            return unavailable, None
        group = self.groups.get(group_id)
        if group_id in self.consumer.groups:
            return E.NONE, None  # not a classic group: described as Kafka describes an unknown one
        return E.NONE, (group if group is not None and not group.is_(GroupState.DEAD) else None)

    def delete_group(self, group_id: str) -> int:
        if not group_id:
            return E.INVALID_GROUP_ID
        if unavailable := self.unavailable(group_id):
            return unavailable
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            error = self.consumer.delete_group(consumer_group)
            if error:
                return error
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return E.NONE if consumer_group is not None else E.GROUP_ID_NOT_FOUND
        if not group.is_(GroupState.EMPTY):
            return E.NON_EMPTY_GROUP
        return self.drop_group(group)

    def drop_group(self, group: Group) -> int:
        batch: list[Record] = [(records.offset_key(group.group_id, t, p), None) for t, p in group.offsets]
        batch.append((records.group_key(group.group_id), None))
        error = self.write_records(group.group_id, batch)
        if error:
            return error
        group.offsets.clear()
        group.transition(GroupState.DEAD, self.clock.now_ms())
        del self.groups[group.group_id]
        return 0

    def shutdown(self) -> None:
        """The broker is stopping: timers are cancelled and requests still waiting are answered
        NOT_COORDINATOR (clients look the coordinator up again and retry there)."""
        self.consumer.shutdown()
        self._drop_groups(list(self.groups.values()))

    def unload_partition(self, partition: int) -> None:
        """This node stopped leading ``__consumer_offsets`` partition ``partition`` (cluster mode,
        Kafka's ``onResignation``): its groups are dropped as at shutdown, their waiting requests
        answered NOT_COORDINATOR; the new leader loads them from the replicated log."""
        self.consumer.unload(lambda group_id: self.partition_for(group_id) == partition)
        dropped = [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]
        self._drop_groups(dropped)

    def _drop_groups(self, dropped: list[Group]) -> None:
        for group in dropped:
            if group.join_timer is not None:
                group.join_timer.cancel()
                group.join_timer = None
            for member in group.members.values():
                if member.heartbeat_timer is not None:
                    member.heartbeat_timer.cancel()
                    member.heartbeat_timer = None
                if member.join_callback is not None:
                    callback, member.join_callback = member.join_callback, None
                    callback(JoinResult(E.NOT_COORDINATOR, member.member_id))
                if member.sync_callback is not None:
                    callback_sync, member.sync_callback = member.sync_callback, None
                    callback_sync(SyncResult(E.NOT_COORDINATOR))
        for group in dropped:
            self.groups.pop(group.group_id, None)

    # -- loading -------------------------------------------------------------------------

    def load_records(self, partition_records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Replay one ``__consumer_offsets`` partition (oldest first; the last record of a key
        wins, a tombstone deletes) into groups and offsets."""
        replay = OffsetsReplay()
        for key_bytes, value_bytes in partition_records:
            replay.add(key_bytes, value_bytes)
        self.finish_load(replay)

    def finish_load(self, replay: OffsetsReplay, partition: int | None = None) -> None:
        """Install what ``replay`` gathered from ``__consumer_offsets`` partition ``partition``
        (its groups replace loaded ones). The consumer groups' records it read past the high
        watermark reach their committed view only as the partition commits them (Kafka's loader
        replays to the log end, but reads see the timeline at the last committed offset, which
        starts at the high watermark)."""
        now = self.clock.now_ms()
        offsets, group_values = replay.offsets, replay.group_values
        for group_id in set(offsets) | set(group_values):
            value = group_values.get(group_id)
            live_offsets = {tp: c for tp, c in offsets.get(group_id, {}).items() if c is not None}
            if value is None and not live_offsets:
                self.groups.pop(group_id, None)
                continue
            group = Group(group_id, now)
            if value is not None:
                self._restore_group(group, value, now)
            group.offsets = live_offsets
            self.groups[group_id] = group
        self.consumer.load(replay.consumer_replay, replay.committed_consumer)
        view = self.consumer.committed
        for end_offset, batch in replay.uncommitted_consumer:
            assert partition is not None, "records past the high watermark come from a known partition"
            self.on_committed(partition, functools.partial(view.apply, batch), up_to=end_offset)

    def _restore_group(self, group: Group, v: Any, now: int) -> None:
        """Rebuild ``group`` from a GroupMetadataValue: Stable with its members, or Empty."""
        group.protocol_type = v.protocol_type or None
        group.generation = v.generation
        group.protocol_name = v.protocol
        stamp = v.current_state_timestamp
        group.state_timestamp_ms = stamp if stamp >= 0 else now
        for m in v.members:
            member = Member(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout,
                m.session_timeout,
                group.protocol_type or "",
                [(group.protocol_name or "", bytes(m.subscription))],
                assignment=bytes(m.assignment),
            )
            group.add(member)
        group.leader_id = v.leader if v.leader in group.members else group.leader_id
        if group.members:
            group.state = GroupState.STABLE
            for member in group.members.values():
                self.schedule_heartbeat(group, member)
        else:
            group.state = GroupState.EMPTY


class OffsetsReplay:
    """The state of one ``__consumer_offsets`` partition gathered record by record (the last
    record of a key wins, a tombstone deletes), so a loader can feed it in chunks and yield the
    event loop between them; :meth:`GroupCoordinator.finish_load` installs it."""

    def __init__(self) -> None:
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset | None]] = {}
        self.group_values: dict[str, Any] = {}
        #: every consumer group record read: the live groups
        self.consumer_replay = consumer_records.ConsumerGroupReplay()
        #: the consumer group records committed when read: the committed view's start
        self.committed_consumer = consumer_records.ConsumerGroupReplay()
        #: the consumer group records read past the high watermark, in log order: (the offset
        #: the partition must be committed up to for them to count, their records)
        self.uncommitted_consumer: list[tuple[int, list[Record]]] = []

    def add(self, key_bytes: bytes, value_bytes: bytes | None, commits_at: int | None = None) -> None:
        """Replay one record; ``commits_at``: the record was read past the high watermark, and
        counts as committed once the partition is committed up to that offset."""
        if consumer_records.is_consumer_group_key(key_bytes):
            self.consumer_replay.add(key_bytes, value_bytes)
            if commits_at is None:
                self.committed_consumer.add(key_bytes, value_bytes)
            elif self.uncommitted_consumer and self.uncommitted_consumer[-1][0] == commits_at:
                self.uncommitted_consumer[-1][1].append((key_bytes, value_bytes))
            else:
                self.uncommitted_consumer.append((commits_at, [(key_bytes, value_bytes)]))
            return
        key = records.parse_key(key_bytes)
        if isinstance(key, records.OffsetKey):
            if value_bytes is None:
                self.offsets.setdefault(key.group, {})[(key.topic, key.partition)] = None
            else:
                v = records.parse_offset_value(value_bytes)
                self.offsets.setdefault(key.group, {})[(key.topic, key.partition)] = CommittedOffset(
                    v.offset,
                    v.leader_epoch,
                    v.metadata,
                    v.commit_timestamp,
                    v.expire_timestamp if v.expire_timestamp >= 0 else None,
                )
        elif isinstance(key, records.GroupKey):
            value = None if value_bytes is None else records.parse_group_value(value_bytes)
            self.group_values[key.group] = value
