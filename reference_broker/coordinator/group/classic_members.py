"""Classic-protocol members inside a KIP-848 consumer group, and the online upgrade that puts them
there (Kafka's ``group.consumer.migration.policy``).

A non-empty classic group whose members all use the ``consumer`` embedded protocol becomes a
consumer group when a consumer-protocol member joins it: each classic member becomes a consumer
group member at the classic generation, with its subscription and its current assignment, and
keeps its session timeout and protocols (the ClassicMemberMetadata of its member record). Such
members keep speaking JoinGroup/SyncGroup/Heartbeat/LeaveGroup, translated here onto the consumer
group: a JoinGroup reconciles the member like a consumer heartbeat (its owned partitions come from
its embedded subscription) and answers its member epoch as the generation; SyncGroup answers its
current assignment in the embedded assignment format; Heartbeat answers REBALANCE_IN_PROGRESS
while its assignment must change, which makes it rejoin.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reference_broker.coordinator.group import records as classic_records
from reference_broker.coordinator.group.consumer_group import (
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    TopicInfo,
)
from reference_broker.coordinator.group.state import Group, GroupState, JoinResult, Member, SyncResult
from sdk.protocol import consumer_protocol as embedded
from sdk.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from reference_broker.coordinator.group.consumer_coordinator import ConsumerGroupCoordinator

E = ErrorCode
CONSUMER_PROTOCOL_TYPE = "consumer"
Record = tuple[bytes, bytes | None]


class MigrationPolicy(enum.Enum):
    """Kafka's ``ConsumerGroupMigrationPolicy``."""

    DISABLED = "disabled"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    BIDIRECTIONAL = "bidirectional"

    @property
    def upgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.UPGRADE, MigrationPolicy.BIDIRECTIONAL)

    @property
    def downgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.DOWNGRADE, MigrationPolicy.BIDIRECTIONAL)


class ClassicJoin:
    """What a classic JoinGroup brings to the consumer group's reconciliation."""

    def __init__(self, session_timeout_ms: int, protocols: list[tuple[str, bytes]], owned: Assignment):
        self.session_timeout_ms = session_timeout_ms
        self.protocols = protocols
        self.owned = owned


def classic_records_key(group_id: str) -> bytes:
    """The key of the classic group's metadata record (deleted by the upgrade)."""
    return classic_records.group_key(group_id)


def upgrade_refusal(classic: Group, policy: MigrationPolicy, max_size: int) -> str:
    """Why the classic group cannot become a consumer group now ("" when it can)."""
    if not policy.upgrade_enabled:
        return ": the online upgrade is disabled"
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE or any(
        m.protocol_type != CONSUMER_PROTOCOL_TYPE for m in classic.members.values()
    ):
        return ": the group does not use the consumer embedded protocol"
    if not classic.members:
        return ": the group has no members yet"
    if len(classic.members) > max_size:
        return ": the group size exceeds the consumer group maximum size"
    return ""


def _owned(subscription: Any) -> list[tuple[str, int]]:
    """The (topic, partition) pairs a decoded subscription says its member owns."""
    return [(t.topic, p) for t in subscription.owned_partitions for p in t.partitions]


def _assigned(data: bytes) -> list[tuple[str, int]]:
    message = embedded.decode_assignment_message(data)
    return [(t.topic, p) for t in message.assigned_partitions for p in t.partitions]


def _by_topic(partitions: list[tuple[str, int]]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return grouped


def _to_assignment(
    partitions: list[tuple[str, int]], lookup_topic: Callable[[str], TopicInfo | None]
) -> Assignment:
    found: dict[object, set[int]] = {}
    for topic, partition in partitions:
        info = lookup_topic(topic)
        if info is not None and 0 <= partition < info.num_partitions:
            found.setdefault(info.topic_id, set()).add(partition)
    return {topic_id: frozenset(parts) for topic_id, parts in found.items()}  # type: ignore[misc]


def consumer_group_from_classic(
    classic: Group, lookup_topic: Callable[[str], TopicInfo | None], now_ms: int, batch: list[Record]
) -> ConsumerGroup:
    """Kafka's ``ConsumerGroup.fromClassicGroup``: the group at the classic generation, each member
    holding what the last classic assignment gave it; its records appended to ``batch``."""
    from reference_broker.coordinator.group import consumer_records as rec

    group = ConsumerGroup(classic.group_id, now_ms)
    epoch = classic.generation
    protocol = classic.protocol_name
    for m in classic.members.values():
        try:
            metadata = m.metadata_for(protocol) if protocol else m.protocols[0][1]
            subscription = embedded.decode_subscription_message(metadata)
            assigned = _assigned(m.assignment) if m.assignment else []
        except Exception:
            from reference_broker.coordinator.group.consumer_coordinator import Refused

            raise Refused(
                E.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade the classic group {classic.group_id} to consumer group because the"
                " embedded consumer protocol is malformed.",
            ) from None
        member = ConsumerGroupMember(
            m.member_id,
            instance_id=m.group_instance_id,
            rack_id=subscription.rack_id or None,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=tuple(sorted(subscription.topics)),
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            member_epoch=epoch,
            previous_member_epoch=epoch,
            state=MemberState.STABLE,
            assigned=_to_assignment(assigned, lookup_topic),
            classic_session_timeout_ms=m.session_timeout_ms,
            classic_protocols=tuple(m.protocols),
        )
        group.update_member(member)
        group.target[member.member_id] = dict(member.assigned)
        group.converted_members.append(member.member_id)
    names = group.subscribed_topic_names()
    topics = {n: info for n in sorted(names) if (info := lookup_topic(n)) is not None}
    group.subscription_metadata = topics
    group.metadata_hash = rec.metadata_hash(topics)
    group.group_epoch = group.assignment_epoch = epoch
    for member in group.members.values():
        batch.append(rec.member_record(group.group_id, member))
    batch.append(rec.epoch_record(group.group_id, epoch, group.metadata_hash))
    for member in group.members.values():
        batch.append(rec.target_record(group.group_id, member.member_id, member.assigned))
    batch.append(rec.target_epoch_record(group.group_id, epoch))
    for member in group.members.values():
        batch.append(rec.current_record(group.group_id, member))
    return group


def downgrade_refusal(group: ConsumerGroup, leaving_id: str, policy: MigrationPolicy, max_size: int) -> str:
    """Why the consumer group cannot become a classic group when ``leaving_id`` goes ("" when it
    can: every other member speaks the classic protocol and there is at least one)."""
    rest = [m for mid, m in group.members.items() if mid != leaving_id]
    if not rest or any(not m.uses_classic_protocol for m in rest):
        return ": members use the consumer protocol" if rest else ": the group would be empty"
    if not policy.downgrade_enabled:
        return ": the online downgrade is disabled"
    if not common_protocols(rest):
        return ": its members share no protocol"
    if len(rest) > max_size:
        return ": the group size exceeds the classic group maximum size"
    return ""


def replacement_downgrade_refusal(
    group: ConsumerGroup, replaced_id: str, policy: MigrationPolicy, max_size: int
) -> str:
    """Kafka's ``validateOnlineDowngradeWithReplacedMemberId``: why a classic static member
    replacing ``replaced_id`` does not make the group classic ("" when it does: the replaced member
    is the last one on the consumer protocol)."""
    replaced = group.members.get(replaced_id)
    others = [m for mid, m in group.members.items() if mid != replaced_id]
    if replaced is None or replaced.uses_classic_protocol or any(not m.uses_classic_protocol for m in others):
        return ": members use the consumer protocol"
    if not policy.downgrade_enabled:
        return ": the online downgrade is disabled"
    if len(group.members) > max_size:
        return ": the group size exceeds the classic group maximum size"
    return ""


def common_protocols(members: list[ConsumerGroupMember]) -> set[str]:
    """The protocol names every one of these classic members supports."""
    names = [{name for name, _ in m.classic_protocols} for m in members]
    return set.intersection(*names) if names else set()


def classic_group_from_consumer(
    group: ConsumerGroup, leaving_id: str, topic_name: Callable[[uuid.UUID], str | None], now_ms: int
) -> Group:
    """Kafka's ``ClassicGroup.fromConsumerGroup``: Stable at the group epoch, each remaining member
    with its target assignment in the embedded format of its protocol."""
    classic = Group(group.group_id, now_ms)
    classic.state = GroupState.STABLE
    classic.generation = group.group_epoch
    classic.protocol_type = CONSUMER_PROTOCOL_TYPE
    for member_id, m in group.members.items():
        if member_id == leaving_id:
            continue
        classic.add(
            Member(
                member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.classic_session_timeout_ms or 0,
                CONSUMER_PROTOCOL_TYPE,
                list(m.classic_protocols),
            )
        )
    classic.protocol_name = classic.select_protocol()
    for member in classic.members.values():
        partitions = [
            (name, p)
            for topic_id, parts in group.target.get(member.member_id, {}).items()
            if (name := topic_name(topic_id)) is not None
            for p in sorted(parts)
        ]
        version = min(metadata_version(member.metadata_for(classic.protocol_name)), embedded.HIGHEST_VERSION)
        member.assignment = embedded.encode_assignment_message(_by_topic(partitions), None, version)
    return classic


class ClassicMembers:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup of classic members of consumer groups."""

    def __init__(self, consumer: ConsumerGroupCoordinator):
        self.consumer = consumer

    @staticmethod
    def _names(group: ConsumerGroup, assignment: Assignment) -> list[tuple[str, int]]:
        by_id = {info.topic_id: name for name, info in group.subscription_metadata.items()}
        return [
            (by_id[topic_id], p)
            for topic_id, parts in assignment.items()
            if topic_id in by_id
            for p in sorted(parts)
        ]

    def join(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        """Kafka's ``classicGroupJoinToConsumerGroup``."""
        from reference_broker.coordinator.group.consumer_coordinator import (
            HeartbeatArgs,
            Refused,
            kafka_uuid_string,
        )

        if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        others = [m for mid, m in group.members.items() if m.uses_classic_protocol and mid != member_id]
        if others and not common_protocols(others) & {name for name, _ in protocols}:
            # Kafka's supportsClassicProtocols: the classic members must keep a protocol in common.
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if not member_id:
            member_id = kafka_uuid_string()
            if require_known_member_id and instance_id is None:
                return JoinResult(E.MEMBER_ID_REQUIRED, member_id)
        elif instance_id is not None and group.static_members.get(instance_id, member_id) != member_id:
            return JoinResult(E.FENCED_INSTANCE_ID, member_id)
        try:
            subscription = embedded.decode_subscription_message(protocols[0][1])
        except Exception:
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        args = HeartbeatArgs(
            group_id=group.group_id,
            member_id=member_id,
            member_epoch=0,
            instance_id=instance_id,
            rack_id=subscription.rack_id or None,
            rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=sorted(subscription.topics),
            client_id=client_id,
            client_host=client_host,
        )
        owned = _to_assignment(_owned(subscription), self.consumer.lookup_topic)
        replaced_id = group.static_members.get(instance_id) if instance_id is not None else None
        downgrade = (
            replaced_id is not None
            and replaced_id != member_id
            and not replacement_downgrade_refusal(
                group,
                replaced_id,
                self.consumer.migration_policy,
                self.consumer.membership.config.max_group_size,
            )
        )
        try:
            answer = self.consumer._heartbeat(args, ClassicJoin(session_timeout_ms, protocols, owned))
        except Refused as refused:
            return JoinResult(refused.code, member_id)
        joined = self.consumer.groups.get(group.group_id)
        if joined is not None and downgrade:
            # The last consumer-protocol member is gone: the group is classic from now on, Stable
            # with the joining member in the replaced one's place (no rebalance).
            try:
                self.consumer._downgrade(joined, "", rebalance=False)
            except Refused as refused:
                return JoinResult(refused.code, member_id)
        elif joined is not None:
            # Kafka's sync timeout: the member must send its SyncGroup within its rebalance timeout.
            self._schedule_timeout(
                joined, member_id, rebalance_timeout_ms, "it sent no SyncGroup in time", True
            )
        return JoinResult(
            0, member_id, answer.member_epoch, CONSUMER_PROTOCOL_TYPE, protocols[0][0], "", members=[]
        )

    def _member(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerGroupMember | int:
        if instance_id is not None:
            owner = group.static_members.get(instance_id)
            if owner is None:
                return E.UNKNOWN_MEMBER_ID
            if owner != member_id:
                return E.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None or not member.uses_classic_protocol:
            return E.UNKNOWN_MEMBER_ID
        return member

    def sync(
        self,
        group: ConsumerGroup,
        generation: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        """Kafka's ``classicGroupSyncToConsumerGroup``: the member's current assignment."""
        member = self._member(group, member_id, instance_id)
        if isinstance(member, int):
            return SyncResult(member)
        if generation != member.member_epoch:
            return SyncResult(E.ILLEGAL_GENERATION)
        name, metadata = member.classic_protocols[0]
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name != name
        ):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.group_epoch > member.member_epoch and member.state != MemberState.UNREVOKED_PARTITIONS:
            self._schedule_rejoin_timeout(group, member)
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        timer = group.classic_timers.pop(member_id, None)
        if timer is not None:
            timer.cancel()
        self.consumer._schedule_session_timeout(group, member_id)
        version = min(metadata_version(metadata), embedded.HIGHEST_VERSION)
        assignment = embedded.encode_assignment_message(
            _by_topic(self._names(group, member.assigned)), None, version
        )
        return SyncResult(0, CONSUMER_PROTOCOL_TYPE, name, assignment)

    def heartbeat(
        self, group: ConsumerGroup, generation: int, member_id: str, instance_id: str | None
    ) -> int:
        """Kafka's ``classicGroupHeartbeatToConsumerGroup``: REBALANCE_IN_PROGRESS makes the member
        rejoin while the group epoch moved past it, it must revoke partitions, or partitions it
        waits for were released."""
        member = self._member(group, member_id, instance_id)
        if isinstance(member, int):
            return member
        if generation != member.member_epoch:
            return E.ILLEGAL_GENERATION
        self.consumer._schedule_session_timeout(group, member_id)
        if (
            member.member_epoch < group.group_epoch
            or member.state == MemberState.UNREVOKED_PARTITIONS
            or (member.state == MemberState.UNRELEASED_PARTITIONS and self._released(group, member))
        ):
            self._schedule_rejoin_timeout(group, member)
            return E.REBALANCE_IN_PROGRESS
        return 0

    def _schedule_rejoin_timeout(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """Kafka's join timeout: a member told to rejoin must within its rebalance timeout."""
        self._schedule_timeout(
            group, member.member_id, member.rebalance_timeout_ms, "it did not rejoin in time", False
        )

    def _schedule_timeout(
        self, group: ConsumerGroup, member_id: str, timeout_ms: int, why: str, replace: bool
    ) -> None:
        if member_id in group.classic_timers:
            if not replace:
                return
            group.classic_timers.pop(member_id).cancel()
        group_id = group.group_id
        group.classic_timers[member_id] = self.consumer.clock.call_later(
            max(timeout_ms, 0),
            lambda: self.consumer._fence_if(group_id, member_id, f"classic member: {why}", lambda m: True),
        )

    @staticmethod
    def _released(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """A partition of the member's target that it does not hold yet is free now."""
        for topic_id, parts in group.target.get(member.member_id, {}).items():
            held = member.assigned.get(topic_id, frozenset())
            if any(group.partition_epoch(topic_id, p) == -1 for p in parts - held):
                return True
        return False

    def leave(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> tuple[str, int]:
        """Kafka's ``classicGroupLeaveToConsumerGroup`` for one member: (its member id, error)."""
        from reference_broker.coordinator.group.consumer_coordinator import Refused

        if instance_id is not None:
            owner = group.static_members.get(instance_id)
            if owner is None:
                return member_id, E.UNKNOWN_MEMBER_ID
            if member_id and owner != member_id:
                return member_id, E.FENCED_INSTANCE_ID
            member_id = owner
        member = group.members.get(member_id)
        if member is None or not member.uses_classic_protocol:
            return member_id, E.UNKNOWN_MEMBER_ID
        try:
            self.consumer._fence(group, member)
        except Refused as refused:
            return member_id, refused.code
        return member_id, 0


def metadata_version(metadata: bytes) -> int:
    """The version of an embedded consumer protocol message (its first two bytes)."""
    return int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0
