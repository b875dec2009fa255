"""The ``__consumer_offsets`` records of KIP-848 consumer groups, Kafka 4.1's formats (key versions
3-8 and 16), through the generated ``reference_broker.internal_records`` classes, and their replay.

Key version -> record: 3 group epoch (ConsumerGroupMetadata, with the hash of the subscribed
topics' metadata), 4 subscribed topics (ConsumerGroupPartitionMetadata: the layout before Kafka
4.1, which the hash replaced; only read, and deleted once the group writes its epoch again), 5
member subscription (ConsumerGroupMemberMetadata), 6 target assignment epoch
(ConsumerGroupTargetAssignmentMetadata), 7 a member's target assignment
(ConsumerGroupTargetAssignmentMember), 8 a member's current assignment
(ConsumerGroupCurrentMemberAssignment), 16 a regular expression's resolved topics
(ConsumerGroupRegularExpression). Every value is version 0; a null value deletes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from collections.abc import Callable, Iterable
from typing import Any

from reference_broker.coordinator.group.consumer_group import (
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    ResolvedRegex,
    TopicInfo,
)
from reference_broker.internal_records import (
    ConsumerGroupCurrentMemberAssignmentKey as CurrentKey,
)
from reference_broker.internal_records import (
    ConsumerGroupCurrentMemberAssignmentValue as CurrentValue,
)
from reference_broker.internal_records import (
    ConsumerGroupMemberMetadataKey as MemberKey,
)
from reference_broker.internal_records import (
    ConsumerGroupMemberMetadataValue as MemberValue,
)
from reference_broker.internal_records import (
    ConsumerGroupMetadataKey as EpochKey,
)
from reference_broker.internal_records import (
    ConsumerGroupMetadataValue as EpochValue,
)
from reference_broker.internal_records import (
    ConsumerGroupPartitionMetadataKey as TopicsKey,
)
from reference_broker.internal_records import (
    ConsumerGroupPartitionMetadataValue as TopicsValue,
)
from reference_broker.internal_records import (
    ConsumerGroupRegularExpressionKey as RegexKey,
)
from reference_broker.internal_records import (
    ConsumerGroupRegularExpressionValue as RegexValue,
)
from reference_broker.internal_records import (
    ConsumerGroupTargetAssignmentMemberKey as TargetKey,
)
from reference_broker.internal_records import (
    ConsumerGroupTargetAssignmentMemberValue as TargetValue,
)
from reference_broker.internal_records import (
    ConsumerGroupTargetAssignmentMetadataKey as TargetEpochKey,
)
from reference_broker.internal_records import (
    ConsumerGroupTargetAssignmentMetadataValue as TargetEpochValue,
)
from sdk.protocol.codec import decode, encode
from sdk.protocol.messages import Message

Record = tuple[bytes, bytes | None]

EPOCH, TOPICS, MEMBER, TARGET_EPOCH, TARGET, CURRENT, REGEX = 3, 4, 5, 6, 7, 8, 16
KEY_CLASSES: dict[int, type[Message]] = {
    EPOCH: EpochKey,
    TOPICS: TopicsKey,
    MEMBER: MemberKey,
    TARGET_EPOCH: TargetEpochKey,
    TARGET: TargetKey,
    CURRENT: CurrentKey,
    REGEX: RegexKey,
}
VALUE_CLASSES: dict[int, type[Message]] = {
    EPOCH: EpochValue,
    TOPICS: TopicsValue,
    MEMBER: MemberValue,
    TARGET_EPOCH: TargetEpochValue,
    TARGET: TargetValue,
    CURRENT: CurrentValue,
    REGEX: RegexValue,
}


def topic_names_version(names: Iterable[str]) -> int:
    """A non-negative 63-bit digest of the set of topic names: the version a regex was resolved
    against (Kafka keeps its metadata image's offset there), different once a topic comes or goes."""
    digest = hashlib.blake2b(digest_size=8)
    for name in sorted(names):
        encoded = name.encode()
        digest.update(struct.pack(">H", len(encoded)) + encoded)
    (value,) = struct.unpack(">Q", digest.digest())
    return int(value) >> 1


def metadata_hash(topics: dict[str, TopicInfo]) -> int:
    """A signed 64-bit digest of the subscribed topics (name, id, partition count), 0 for none:
    what the group epoch record keeps so that a change of the topics while the broker was down is
    seen at the next heartbeat. Only this broker reads it (Kafka computes its own)."""
    if not topics:
        return 0
    digest = hashlib.blake2b(digest_size=8)
    for t in sorted(topics.values(), key=lambda t: t.name):
        name = t.name.encode()
        digest.update(struct.pack(">H", len(name)) + name)
        digest.update(t.topic_id.bytes + struct.pack(">i", t.num_partitions))
    (value,) = struct.unpack(">q", digest.digest())
    return int(value) or 1


def is_consumer_group_key(key: bytes) -> bool:
    return len(key) >= 2 and struct.unpack_from(">h", key)[0] in KEY_CLASSES


def _key(kind: int, group_id: str, member_id: str | None = None) -> bytes:
    fields: dict[str, Any] = {"group_id": group_id}
    if member_id is not None:
        fields["member_id"] = member_id
    return struct.pack(">h", kind) + encode(KEY_CLASSES[kind](**fields), kind)


def _value(msg: Message) -> bytes:
    return struct.pack(">h", 0) + encode(msg, 0)


def _partitions(cls: Any, assignment: Assignment) -> list[Any]:
    return [
        cls(topic_id=t, partitions=sorted(ps))
        for t, ps in sorted(assignment.items(), key=lambda i: str(i[0]))
        if ps
    ]


def epoch_record(group_id: str, epoch: int, topics_hash: int) -> Record:
    return _key(EPOCH, group_id), _value(EpochValue(epoch=epoch, metadata_hash=topics_hash))


def topics_record(group_id: str, topics: dict[str, TopicInfo]) -> Record:
    """The subscribed topics record of the layout before Kafka 4.1 (tests write old data dirs)."""
    value = TopicsValue(
        topics=[
            TopicsValue.TopicMetadata(topic_id=t.topic_id, topic_name=t.name, num_partitions=t.num_partitions)
            for t in sorted(topics.values(), key=lambda t: t.name)
        ]
    )
    return _key(TOPICS, group_id), _value(value)


def topics_tombstone(group_id: str) -> Record:
    return _key(TOPICS, group_id), None


def regex_key(group_id: str, regex: str) -> bytes:
    return struct.pack(">h", REGEX) + encode(RegexKey(group_id=group_id, regular_expression=regex), REGEX)


def regex_record(group_id: str, regex: str, resolved: ResolvedRegex) -> Record:
    value = RegexValue(
        topics=sorted(resolved.topics), version=resolved.version, timestamp=resolved.timestamp_ms
    )
    return regex_key(group_id, regex), _value(value)


def regex_tombstone(group_id: str, regex: str) -> Record:
    return regex_key(group_id, regex), None


def member_record(group_id: str, m: ConsumerGroupMember) -> Record:
    value = MemberValue(
        instance_id=m.instance_id,
        rack_id=m.rack_id,
        client_id=m.client_id,
        client_host=m.client_host,
        subscribed_topic_names=list(m.subscribed_topic_names),
        subscribed_topic_regex=m.subscribed_topic_regex,
        rebalance_timeout_ms=m.rebalance_timeout_ms,
        server_assignor=m.server_assignor,
        classic_member_metadata=None
        if m.classic_session_timeout_ms is None
        else MemberValue.ClassicMemberMetadata(
            session_timeout_ms=m.classic_session_timeout_ms,
            supported_protocols=[
                MemberValue.ClassicMemberMetadata.ClassicProtocol(name=name, metadata=metadata)
                for name, metadata in m.classic_protocols
            ],
        ),
    )
    return _key(MEMBER, group_id, m.member_id), _value(value)


def target_epoch_record(group_id: str, epoch: int) -> Record:
    return _key(TARGET_EPOCH, group_id), _value(TargetEpochValue(assignment_epoch=epoch))


def target_record(group_id: str, member_id: str, assignment: Assignment) -> Record:
    value = TargetValue(topic_partitions=_partitions(TargetValue.TopicPartition, assignment))
    return _key(TARGET, group_id, member_id), _value(value)


def current_record(group_id: str, m: ConsumerGroupMember) -> Record:
    value = CurrentValue(
        member_epoch=m.member_epoch,
        previous_member_epoch=m.previous_member_epoch,
        state=int(m.state),
        assigned_partitions=_partitions(CurrentValue.TopicPartitions, m.assigned),
        partitions_pending_revocation=_partitions(CurrentValue.TopicPartitions, m.pending_revocation),
    )
    return _key(CURRENT, group_id, m.member_id), _value(value)


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """Kafka's order when a member goes: current assignment, target, then subscription."""
    return [(_key(kind, group_id, member_id), None) for kind in (CURRENT, TARGET, MEMBER)]


def group_tombstones(group_id: str) -> list[Record]:
    return [(_key(kind, group_id), None) for kind in (TARGET_EPOCH, TOPICS, EPOCH)]


def _assignment(entries: Iterable[Any]) -> Assignment:
    return {e.topic_id: frozenset(e.partitions) for e in entries if e.partitions}


@dataclasses.dataclass
class _GroupRecords:
    """The live records of one consumer group (a tombstone removes its key's entry)."""

    #: None: no epoch record, or its last one is a tombstone (the group does not exist)
    epoch: int | None = None
    metadata_hash: int = 0
    topics: dict[str, TopicInfo] | None = None
    target_epoch: int | None = None
    subscriptions: dict[str, Any] = dataclasses.field(default_factory=dict)
    targets: dict[str, Assignment] = dataclasses.field(default_factory=dict)
    currents: dict[str, Any] = dataclasses.field(default_factory=dict)
    regexes: dict[str, ResolvedRegex] = dataclasses.field(default_factory=dict)

    def build(self, group_id: str, now_ms: int) -> ConsumerGroup | None:
        """The group these records describe; None when it does not exist."""
        if self.epoch is None:
            return None
        group = ConsumerGroup(group_id, now_ms)
        group.group_epoch = self.epoch
        group.assignment_epoch = self.target_epoch or 0
        group.subscription_metadata = dict(self.topics or {})
        group.has_partition_metadata_record = self.topics is not None
        group.metadata_hash = self.metadata_hash
        if group.has_partition_metadata_record and not group.metadata_hash:
            # Written before Kafka 4.1's layout: the hash comes from the topics record.
            group.metadata_hash = metadata_hash(group.subscription_metadata)
        for member_id, sub in self.subscriptions.items():
            group.update_member(self._member(member_id, sub))
            target = self.targets.get(member_id)
            if target is not None:
                group.target[member_id] = target
        group.resolved_regexes = dict(self.regexes)
        return group

    def _member(self, member_id: str, sub: Any) -> ConsumerGroupMember:
        member = ConsumerGroupMember(
            member_id,
            sub.instance_id,
            sub.rack_id,
            sub.client_id,
            sub.client_host,
            tuple(sub.subscribed_topic_names),
            sub.subscribed_topic_regex,
            sub.rebalance_timeout_ms,
            sub.server_assignor,
        )
        classic = sub.classic_member_metadata
        if classic is not None and classic.supported_protocols:
            member.classic_session_timeout_ms = classic.session_timeout_ms
            member.classic_protocols = tuple((p.name, bytes(p.metadata)) for p in classic.supported_protocols)
        current = self.currents.get(member_id)
        if current is not None:
            member.member_epoch = current.member_epoch
            member.previous_member_epoch = current.previous_member_epoch
            member.state = (
                MemberState(current.state)
                if current.state in MemberState._value2member_map_
                else MemberState.UNKNOWN
            )
            member.assigned = _assignment(current.assigned_partitions)
            member.pending_revocation = _assignment(current.partitions_pending_revocation)
        return member


def _put(entries: dict[str, Any], key: str, value: Any) -> None:
    if value is None:
        entries.pop(key, None)
    else:
        entries[key] = value


class ConsumerGroupReplay:
    """Rebuilds consumer groups from their records, oldest first (the last record of a key wins).

    Only live records are kept: a tombstone removes its key, and the group epoch's tombstone
    (written last when a group goes, after its members' and its other records' tombstones, as
    Kafka writes them) removes everything of the group, so a replay fed for a long time (the
    committed view, ``consumer_views``) does not grow with groups and members that are gone."""

    def __init__(self) -> None:
        self._groups: dict[str, _GroupRecords] = {}

    def add(self, key_bytes: bytes, value_bytes: bytes | None) -> None:
        (kind,) = struct.unpack_from(">h", key_bytes)
        key: Any = decode(KEY_CLASSES[kind], memoryview(key_bytes)[2:], kind)
        value: Any = None
        if value_bytes is not None:
            (version,) = struct.unpack_from(">h", value_bytes)
            value = decode(VALUE_CLASSES[kind], memoryview(value_bytes)[2:], version)
        records = self._groups.setdefault(key.group_id, _GroupRecords())
        if kind == REGEX:
            resolved = None
            if value is not None:
                resolved = ResolvedRegex(frozenset(value.topics), value.version, value.timestamp)
            _put(records.regexes, key.regular_expression, resolved)
        elif kind == EPOCH:
            if value is None:
                self._groups[key.group_id] = _GroupRecords()
            else:
                records.epoch, records.metadata_hash = value.epoch, value.metadata_hash
        elif kind == TOPICS:
            records.topics = (
                None
                if value is None
                else {t.topic_name: TopicInfo(t.topic_id, t.topic_name, t.num_partitions)
                      for t in value.topics}
            )
        elif kind == TARGET_EPOCH:
            records.target_epoch = None if value is None else value.assignment_epoch
        elif kind == MEMBER:
            _put(records.subscriptions, key.member_id, value)
        elif kind == TARGET:
            target = None if value is None else _assignment(value.topic_partitions)
            _put(records.targets, key.member_id, target)
        else:
            _put(records.currents, key.member_id, value)

    def group(self, group_id: str, now_ms: int) -> ConsumerGroup | None:
        """The group as its records replayed so far describe it; None when it does not exist."""
        records = self._groups.get(group_id)
        return None if records is None else records.build(group_id, now_ms)

    def group_ids(self) -> list[str]:
        """The ids of the groups that exist after the replay."""
        return [group_id for group_id, records in self._groups.items() if records.epoch is not None]

    def groups(self, now_ms: int) -> tuple[dict[str, ConsumerGroup], set[str]]:
        """(groups that exist after the replay, ids of groups whose records deleted them)."""
        built = {group_id: self._groups[group_id].build(group_id, now_ms) for group_id in self.group_ids()}
        deleted = {group_id for group_id, records in self._groups.items() if records.epoch is None}
        return {g: group for g, group in built.items() if group is not None}, deleted

    def take_over(self, other: ConsumerGroupReplay) -> None:
        """The groups ``other`` replayed replace this replay's (a partition loaded again)."""
        for group_id, records in other._groups.items():
            if records.epoch is None:
                self._groups.pop(group_id, None)
            else:
                self._groups[group_id] = records

    def drop(self, moved: Callable[[str], bool]) -> None:
        """Forget the groups ``moved`` names."""
        for group_id in [g for g in self._groups if moved(g)]:
            del self._groups[group_id]

    def clear(self) -> None:
        self._groups.clear()
