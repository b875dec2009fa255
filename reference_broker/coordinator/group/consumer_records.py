"""The ``__consumer_offsets`` records of KIP-848 consumer groups, Kafka's formats (key versions 3-8),
through the generated ``reference_broker.internal_records`` classes, and their replay.

Key version -> record: 3 group epoch (ConsumerGroupMetadata), 4 subscribed topics
(ConsumerGroupPartitionMetadata), 5 member subscription (ConsumerGroupMemberMetadata), 6 target
assignment epoch (ConsumerGroupTargetAssignmentMetadata), 7 a member's target assignment
(ConsumerGroupTargetAssignmentMember), 8 a member's current assignment
(ConsumerGroupCurrentMemberAssignment). Every value is version 0; a null value deletes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from reference_broker.coordinator.group.consumer_group import (
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
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

EPOCH, TOPICS, MEMBER, TARGET_EPOCH, TARGET, CURRENT = 3, 4, 5, 6, 7, 8
KEY_CLASSES: dict[int, type[Message]] = {
    EPOCH: EpochKey,
    TOPICS: TopicsKey,
    MEMBER: MemberKey,
    TARGET_EPOCH: TargetEpochKey,
    TARGET: TargetKey,
    CURRENT: CurrentKey,
}
VALUE_CLASSES: dict[int, type[Message]] = {
    EPOCH: EpochValue,
    TOPICS: TopicsValue,
    MEMBER: MemberValue,
    TARGET_EPOCH: TargetEpochValue,
    TARGET: TargetValue,
    CURRENT: CurrentValue,
}


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


def epoch_record(group_id: str, epoch: int) -> Record:
    return _key(EPOCH, group_id), _value(EpochValue(epoch=epoch))


def topics_record(group_id: str, topics: dict[str, TopicInfo]) -> Record:
    value = TopicsValue(
        topics=[
            TopicsValue.TopicMetadata(topic_id=t.topic_id, topic_name=t.name, num_partitions=t.num_partitions)
            for t in sorted(topics.values(), key=lambda t: t.name)
        ]
    )
    return _key(TOPICS, group_id), _value(value)


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
        classic_member_metadata=None,
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


class ConsumerGroupReplay:
    """Rebuilds consumer groups from their records, oldest first (the last record of a key wins)."""

    def __init__(self) -> None:
        self.epochs: dict[str, int | None] = {}
        self.topics: dict[str, dict[str, TopicInfo] | None] = {}
        self.target_epochs: dict[str, int | None] = {}
        self.subscriptions: dict[tuple[str, str], Any] = {}
        self.targets: dict[tuple[str, str], Assignment | None] = {}
        self.currents: dict[tuple[str, str], Any] = {}

    def add(self, key_bytes: bytes, value_bytes: bytes | None) -> None:
        (kind,) = struct.unpack_from(">h", key_bytes)
        key: Any = decode(KEY_CLASSES[kind], memoryview(key_bytes)[2:], kind)
        value: Any = None
        if value_bytes is not None:
            (version,) = struct.unpack_from(">h", value_bytes)
            value = decode(VALUE_CLASSES[kind], memoryview(value_bytes)[2:], version)
        group_id = key.group_id
        if kind == EPOCH:
            self.epochs[group_id] = None if value is None else value.epoch
        elif kind == TOPICS:
            self.topics[group_id] = (
                None
                if value is None
                else {
                    t.topic_name: TopicInfo(t.topic_id, t.topic_name, t.num_partitions) for t in value.topics
                }
            )
        elif kind == TARGET_EPOCH:
            self.target_epochs[group_id] = None if value is None else value.assignment_epoch
        elif kind == MEMBER:
            self.subscriptions[(group_id, key.member_id)] = value
        elif kind == TARGET:
            self.targets[(group_id, key.member_id)] = (
                None if value is None else _assignment(value.topic_partitions)
            )
        else:
            self.currents[(group_id, key.member_id)] = value

    def groups(self, now_ms: int) -> tuple[dict[str, ConsumerGroup], set[str]]:
        """(groups that exist after the replay, ids of groups whose last record deleted them)."""
        built: dict[str, ConsumerGroup] = {}
        for group_id, epoch in self.epochs.items():
            if epoch is None:
                continue
            group = built[group_id] = ConsumerGroup(group_id, now_ms)
            group.group_epoch = epoch
            group.assignment_epoch = self.target_epochs.get(group_id) or 0
            group.subscription_metadata = self.topics.get(group_id) or {}
        for (group_id, member_id), sub in self.subscriptions.items():
            owner = built.get(group_id)
            if owner is None or sub is None:
                continue
            group = owner
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
            current = self.currents.get((group_id, member_id))
            if current is not None:
                member.member_epoch = current.member_epoch
                member.previous_member_epoch = current.previous_member_epoch
                member.state = (
                    MemberState(current.state)
                    if current.state in MemberState._value2member_map_
                    else (MemberState.UNKNOWN)
                )
                member.assigned = _assignment(current.assigned_partitions)
                member.pending_revocation = _assignment(current.partitions_pending_revocation)
            group.update_member(member)
            target = self.targets.get((group_id, member_id))
            if target is not None:
                group.target[member_id] = target
        deleted = {g for g, epoch in self.epochs.items() if epoch is None}
        return built, deleted
