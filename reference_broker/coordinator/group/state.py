"""A classic group and its members, as Kafka's ``GroupMetadata``/``MemberMetadata`` keep them."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

from reference_broker.clock import TimerHandle


class GroupState(enum.Enum):
    """Kafka's classic group states; the value is the name DescribeGroups/ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class IllegalGroupTransition(Exception):
    """A classic group was asked to move to a state its current one cannot lead to (a coordinator
    bug, as Kafka's IllegalStateException: the request fails instead of corrupting the group)."""


_S = GroupState
#: Kafka's ``ClassicGroupState`` validPreviousStates: state -> the states it may be entered from.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset({_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}),
}


def check_group_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    """Raise ``IllegalGroupTransition`` unless ``current`` may lead to ``target``."""
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalGroupTransition(
            f"group {group_id} cannot move from {current.value} to {target.value}"
            f" (only from {', '.join(sorted(s.value for s in VALID_PREVIOUS_STATES[target]))})"
        )


@dataclasses.dataclass
class JoinResult:
    """What a JoinGroup request is answered with."""

    error: int
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    #: (member_id, group_instance_id, metadata) for the leader, empty for the others.
    members: list[tuple[str, str | None, bytes]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclasses.dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    #: (name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_callback: JoinCallback | None = None
    sync_callback: SyncCallback | None = None
    heartbeat_timer: TimerHandle | None = None
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclasses.dataclass
class CommittedOffset:
    """One committed offset (Kafka's ``OffsetAndMetadata``)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


class Group:
    """One group: membership, generation, selected protocol and its committed offsets."""

    def __init__(self, group_id: str, now_ms: int):
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        #: Member ids handed out with MEMBER_ID_REQUIRED, not joined yet (JoinGroup v4+).
        self.pending_members: set[str] = set()
        self.new_member_added = False
        #: Members of this generation that have not sent SyncGroup yet.
        self.pending_sync: set[str] = set()
        self.join_timer: TimerHandle | None = None
        #: The first join window of an empty group (group.initial.rebalance.delay.ms) runs to its end.
        self.initial_delay_active = False
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        #: Transactional offset commits not yet committed, by producer id: they land here and move
        #: to ``offsets`` when their transaction commits (the transaction coordinator's issue).
        self.pending_transactional_offsets: dict[int, dict[tuple[str, int], CommittedOffset]] = {}
        #: protocol name -> members supporting it (Kafka's ``supportedProtocols``), so a join checks
        #: its protocols against the group in time independent of the group's size
        self._protocol_counts: dict[str, int] = {}
        #: members that had not rejoined when the rebalance started and may still not have; pruned
        #: as they are found rejoined or gone, so ``all_members_joined`` is amortized O(1) per join
        self._not_rejoined: set[str] = set()

    def transition(self, state: GroupState, now_ms: int) -> None:
        """Move to ``state``, which the current state must be allowed to lead to
        (``VALID_PREVIOUS_STATES``); a group being restored at load sets ``state`` directly."""
        check_group_transition(self.group_id, self.state, state)
        self.state = state
        self.state_timestamp_ms = now_ms

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def empty(self) -> bool:
        return not self.members

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.count_protocols(member, 1)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.count_protocols(member, -1)
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def is_static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """A known instance id whose current member id is another one (KIP-345)."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def count_protocols(self, member: Member, step: int) -> None:
        """Count ``member``'s protocols in (``step`` 1) or out (-1) of the group's tally; every
        change of ``members`` or of a member's ``protocols`` goes through here."""
        counts = self._protocol_counts
        for name in {name for name, _ in member.protocols}:
            left = counts.get(name, 0) + step
            if left:
                counts[name] = left
            else:
                counts.pop(name, None)

    def set_protocols(self, member: Member, protocols: list[tuple[str, bytes]]) -> None:
        """Change a member's protocols, keeping the tally right."""
        self.count_protocols(member, -1)
        member.protocols = list(protocols)
        self.count_protocols(member, 1)

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        size = len(self.members)
        return {name for name, count in self._protocol_counts.items() if count == size} if size else set()

    def start_join_window(self) -> None:
        """A rebalance starts: remember who must still rejoin (members without a pending join)."""
        self._not_rejoined = {mid for mid, m in self.members.items() if not m.awaiting_join}

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's ``supportsProtocols``: a new member must share the group's protocol type and at
        least one protocol with every current member."""
        if not protocol_type or not protocols:
            return False
        if self.empty:
            return True
        return protocol_type == self.protocol_type and bool(
            self.candidate_protocols() & {name for name, _ in protocols}
        )

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; most votes wins (ties: the first
        candidate counted, in member order, as Kafka's ``maxBy`` over the vote map does)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def awaiting_join_count(self, bound: int) -> int:
        """Members whose join is waiting (Kafka's ``numAwaitingJoinResponse``), exact when at
        least ``bound``; below ``bound`` the member count stands in (it is never smaller), which
        keeps the check cheap unless the group is full. Only meaningful while PreparingRebalance."""
        if len(self.members) < bound:
            return len(self.members)
        members = self.members
        self._not_rejoined = {
            mid for mid in self._not_rejoined if mid in members and not members[mid].awaiting_join
        }
        return len(members) - len(self._not_rejoined)

    def all_members_joined(self) -> bool:
        """Every member has a join waiting and no member id handed out is still unused.

        Only meaningful while PreparingRebalance, after :meth:`start_join_window`: members added
        during the window always come with a join, and a member's join is only answered when the
        window closes, so the members that may lack one are a subset of ``_not_rejoined``."""
        if self.pending_members:
            return False
        waiting = self._not_rejoined
        members = self.members
        while waiting:
            member_id = next(iter(waiting))
            member = members.get(member_id)
            if member is not None and not member.awaiting_join:
                return False
            waiting.discard(member_id)
        return True

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to when the protocol is "consumer" (None if unknown)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        from sdk.protocol.codec import decode
        from sdk.protocol.messages import ConsumerProtocolSubscription

        topics: set[str] = set()
        for member in self.members.values():
            try:
                raw = member.metadata_for(self.protocol_name)
                version = int.from_bytes(raw[:2], "big", signed=True)
                sub: Any = decode(
                    ConsumerProtocolSubscription,
                    raw[2:],
                    min(version, ConsumerProtocolSubscription.VALID_VERSIONS[1]),
                )
            except Exception:
                return None
            topics.update(sub.topics)
        return topics
