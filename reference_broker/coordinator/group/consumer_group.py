"""A consumer group of the KIP-848 protocol and its members, as Kafka's ``ConsumerGroup`` and
``ConsumerGroupMember`` keep them.

Three assignments exist per member: the *target* (what the server-side assignor computed for the
group epoch ``assignment_epoch``), the *current* one (``assigned``: what the member may consume at
its ``member_epoch``) and ``pending_revocation`` (partitions the member still holds and was asked
to give up). A partition belongs to at most one member at a time: ``partition_owners`` records the
member holding it, assigned or pending revocation, and a partition is handed to a new
owner only once it is absent from that map (``reconciliation``).
"""

from __future__ import annotations

import dataclasses
import enum
import uuid

from reference_broker.clock import TimerHandle

#: topic id -> partitions; the form of every assignment.
Assignment = dict[uuid.UUID, frozenset[int]]

#: Epochs with a meaning of their own in ConsumerGroupHeartbeat.
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.IntEnum):
    """Kafka's ``MemberState``; the value is what ConsumerGroupCurrentMemberAssignmentValue stores."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    """Kafka's ``ConsumerGroupState``; the value is the name ListGroups/ConsumerGroupDescribe show."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def same_assignment(a: Assignment, b: Assignment) -> bool:
    """Equal ignoring topics with no partitions."""
    return {t: p for t, p in a.items() if p} == {t: p for t, p in b.items() if p}


@dataclasses.dataclass
class ConsumerGroupMember:
    """One member: its subscription (what it asked for) and its current assignment state."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = dataclasses.field(default_factory=dict)
    pending_revocation: Assignment = dataclasses.field(default_factory=dict)
    #: A member speaking the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside the consumer
    #: group: its session timeout and its (name, metadata) protocols in order of preference; None
    #: for a consumer-protocol member.
    classic_session_timeout_ms: int | None = None
    classic_protocols: tuple[tuple[str, bytes], ...] = ()

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic_session_timeout_ms is not None

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == epoch

    def subscription(self) -> tuple[object, ...]:
        """What the member's subscription record holds (a change is written and may bump the epoch)."""
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.rebalance_timeout_ms,
            self.server_assignor,
            self.classic_session_timeout_ms,
            self.classic_protocols,
        )

    def assignment_state(self) -> tuple[object, ...]:
        """What the member's current-assignment record holds."""
        return (
            self.member_epoch,
            self.previous_member_epoch,
            self.state,
            self.assigned,
            self.pending_revocation,
        )


@dataclasses.dataclass(frozen=True)
class TopicInfo:
    """A subscribed topic as the group last saw it (ConsumerGroupPartitionMetadataValue)."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclasses.dataclass(frozen=True)
class ResolvedRegex:
    """A regular expression subscription resolved against the topic names (Kafka's
    ResolvedRegularExpression): the matching topics, the version of the topic names it was
    resolved against, and when."""

    topics: frozenset[str]
    version: int
    timestamp_ms: int


class ConsumerGroup:
    """One KIP-848 group: the group epoch, its members, the target assignment and who holds what."""

    def __init__(self, group_id: str, now_ms: int):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}
        #: member id -> target assignment of ``assignment_epoch``.
        self.target: dict[str, Assignment] = {}
        #: (topic id, partition) -> (member id, member epoch) of the member holding it, assigned or
        #: pending revocation.
        self.partition_owners: dict[tuple[uuid.UUID, int], tuple[str, int]] = {}
        #: subscribed topic name -> what it looked like when the group epoch was last bumped.
        self.subscription_metadata: dict[str, TopicInfo] = {}
        #: ``consumer_records.metadata_hash`` of the subscribed topics at the last epoch bump (kept
        #: in the group epoch record): a different hash now means the topics changed.
        self.metadata_hash = 0
        #: The group has a ConsumerGroupPartitionMetadata record (the layout before Kafka 4.1): it is
        #: deleted with the next group epoch record.
        self.has_partition_metadata_record = False
        #: regular expression -> the topics it matched when last resolved (one entry for every regex
        #: a member subscribes with).
        self.resolved_regexes: dict[str, ResolvedRegex] = {}
        #: A regex resolution is scheduled and has not run yet.
        self.regex_resolution_pending = False
        self.created_ms = now_ms
        self.session_timers: dict[str, TimerHandle] = {}
        self.rebalance_timers: dict[str, TimerHandle] = {}
        #: Classic members told to rejoin (or answered a JoinGroup) and not back yet (or not synced
        #: yet): fenced when the timer fires.
        self.classic_timers: dict[str, TimerHandle] = {}
        #: Members of the classic group this group is being converted from, until the conversion
        #: is written (they then need their session timers).
        self.converted_members: list[str] = []

    # -- state ---------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        """Kafka's ``maybeUpdateGroupState``, computed instead of stored."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if all(m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.STABLE
        return ConsumerGroupState.RECONCILING

    def member_topics(self, member: ConsumerGroupMember) -> set[str]:
        """The topics a member is subscribed to: its names and what its regex resolved to (nothing
        until the regex is resolved)."""
        topics = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            resolved = self.resolved_regexes.get(member.subscribed_topic_regex)
            if resolved is not None:
                topics |= resolved.topics
        return topics

    def subscribed_topic_names(self, without: str | None = None) -> set[str]:
        return {
            name
            for member_id, m in self.members.items()
            if member_id != without
            for name in self.member_topics(m)
        }

    def regexes_in_use(self, without: str | None = None) -> set[str]:
        return {
            m.subscribed_topic_regex
            for member_id, m in self.members.items()
            if member_id != without and m.subscribed_topic_regex
        }

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for (Kafka's computePreferredServerAssignor);
        ``default`` when none asks."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        return max(sorted(votes), key=lambda name: votes[name]) if votes else default

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the member holding the partition, -1 when it is free."""
        owner = self.partition_owners.get((topic_id, partition))
        return -1 if owner is None else owner[1]

    # -- changes (applied only after their records are written) ---------------------------

    def update_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    self.partition_owners[(topic_id, p)] = (member.member_id, member.member_epoch)

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        for timers in (self.session_timers, self.rebalance_timers, self.classic_timers):
            timer = timers.pop(member_id, None)
            if timer is not None:
                timer.cancel()
        return member

    def _release(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    owner = self.partition_owners.get((topic_id, p))
                    if owner is not None and owner[0] == member.member_id:
                        del self.partition_owners[(topic_id, p)]

    def cancel_timers(self) -> None:
        for timers in (self.session_timers, self.rebalance_timers, self.classic_timers):
            for timer in timers.values():
                timer.cancel()
            timers.clear()
