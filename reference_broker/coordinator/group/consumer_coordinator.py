"""The KIP-848 consumer group coordinator beside the classic one (Kafka's ``GroupMetadataManager``
holds both): ConsumerGroupHeartbeat, ConsumerGroupDescribe and the member-epoch checks of offset
commits and fetches for consumer groups.

A heartbeat (Kafka's ``consumerGroupHeartbeat``) does, in this order: validate the request and
the member's epoch; update the member's subscription; bump the group epoch when a subscription or
the subscribed topics' partition counts changed; compute a new target assignment with the
group's server assignor when the group epoch is ahead of the assignment epoch; reconcile the
member towards its target (``reconciliation``). Every change is written to
``__consumer_offsets`` (``consumer_records``) through the classic coordinator's store before it is
applied, so a broker restarted from its log rebuilds the same groups. Committed offsets stay in the
classic coordinator's ``GroupOffsets`` (a consumer group's offsets live in its ``Group`` there,
which has no members of its own).

Time comes from the clock: each member has a session timer (reset by every heartbeat) and, while
it holds partitions it was asked to revoke, a rebalance timer; either firing removes the member.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from reference_broker.coordinator.group import consumer_records as rec
from reference_broker.coordinator.group.classic_members import (
    ClassicJoin,
    ClassicMembers,
    MigrationPolicy,
    classic_group_from_consumer,
    classic_records_key,
    consumer_group_from_classic,
    downgrade_refusal,
    upgrade_refusal,
)
from reference_broker.coordinator.group.consumer_group import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    ResolvedRegex,
    TopicInfo,
    same_assignment,
)
from reference_broker.coordinator.group.consumer_views import CommittedConsumerGroups
from reference_broker.coordinator.group.reconciliation import FencedMemberEpoch, reconcile
from reference_broker.coordinator.group.server_assignors import ASSIGNORS, MemberSpec, PartitionAssignorError
from reference_broker.patterns import InvalidPatternError, compile_client_pattern
from sdk.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from reference_broker.coordinator.group.coordinator import GroupCoordinator

log = logging.getLogger("reference_broker.group_coordinator")
E = ErrorCode
#: ConsumerGroupHeartbeat v1+: the client generates its member id (KIP-1082).
CLIENT_MEMBER_ID_VERSION = 1


@dataclasses.dataclass(frozen=True)
class ConsumerGroupConfig:
    """Kafka's ``group.consumer.*`` settings (``reference_broker.config``)."""

    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    assignors: tuple[str, ...] = ("uniform", "range")
    max_size: int = 2**31 - 1


#: topic name -> TopicInfo, or None for a topic that does not exist.
TopicLookup = Callable[[str], "TopicInfo | None"]
#: The names of every topic a regex subscription may match (the internal topics left out).
TopicNames = Callable[[], "list[str]"]
#: Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS: resolved regexes are refreshed at most this often
#: when topics came or went.
REGEX_REFRESH_MIN_INTERVAL_MS = 10_000


@dataclasses.dataclass
class HeartbeatArgs:
    """A ConsumerGroupHeartbeat request, the fields Kafka reads (None: unchanged since last time)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 0


@dataclasses.dataclass
class HeartbeatAnswer:
    error: int = 0
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


class Refused(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def kafka_uuid_string() -> str:
    """A fresh id as Kafka prints ``Uuid``: URL-safe base64 of 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class ConsumerGroupCoordinator:
    """Every consumer group of the broker (``GroupCoordinator.consumer``)."""

    def __init__(self, membership: GroupCoordinator):
        self.membership = membership
        self.config = ConsumerGroupConfig()
        self.lookup_topic: TopicLookup = lambda name: None
        self.topic_names: TopicNames = lambda: []
        #: The live groups: every change as soon as its records are appended (what heartbeats build on).
        self.groups: dict[str, ConsumerGroup] = {}
        #: The groups as committed: what the read APIs show (Kafka reads at the last committed offset).
        self.committed = CommittedConsumerGroups(membership.clock)
        #: Kafka's ``group.consumer.migration.policy``.
        self.migration_policy = MigrationPolicy.BIDIRECTIONAL
        #: JoinGroup, SyncGroup, Heartbeat and LeaveGroup of classic members of consumer groups.
        self.classic = ClassicMembers(self)

    def configure(
        self, config: ConsumerGroupConfig, lookup_topic: TopicLookup, topic_names: TopicNames | None = None
    ) -> None:
        self.config = config
        self.lookup_topic = lookup_topic
        if topic_names is not None:
            self.topic_names = topic_names

    @property
    def clock(self):  # type: ignore[no-untyped-def]
        return self.membership.clock

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------

    def heartbeat(self, args: HeartbeatArgs) -> HeartbeatAnswer:
        try:
            self._validate(args)
            if unavailable := self.membership.unavailable(args.group_id):
                raise Refused(unavailable, "The coordinator is loading the group.")
            if args.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(args)
            return self._heartbeat(args)
        except Refused as refused:
            return HeartbeatAnswer(refused.code, refused.message)

    def _validate(self, a: HeartbeatArgs) -> None:
        def invalid(message: str) -> Refused:
            return Refused(E.INVALID_REQUEST, message)

        if not a.group_id:
            raise invalid("GroupId can't be empty.")
        if a.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if a.rack_id == "":
            raise invalid("RackId can't be empty.")
        if a.subscribed_topic_regex:
            try:
                compile_client_pattern(a.subscribed_topic_regex)
            except InvalidPatternError as exc:
                raise Refused(
                    E.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{a.subscribed_topic_regex}` is not a valid regular"
                    f" expression: {exc}.",
                ) from None
        client_id_required = a.api_version >= CLIENT_MEMBER_ID_VERSION or a.member_epoch != 0
        if client_id_required and not a.member_id:
            raise invalid("MemberId can't be empty.")
        if a.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if a.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if a.owned is None or any(a.owned.values()):
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if a.subscribed_topic_names is None and a.subscribed_topic_regex is None:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif a.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if a.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif a.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if a.server_assignor is not None and a.server_assignor not in self._assignors():
            raise Refused(
                E.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {a.server_assignor} is not supported. Supported assignors:"
                f" {', '.join(self._assignors())}.",
            )

    def _assignors(self) -> list[str]:
        return [name for name in self.config.assignors if name in ASSIGNORS]

    def _group_for(self, group_id: str, create: bool, batch: list[rec.Record]) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.membership.groups.get(group_id)
        if classic is not None and (classic.members or classic.pending_members):
            refusal = upgrade_refusal(classic, self.migration_policy, self.config.max_size) if create else ""
            if refusal or not create:
                raise Refused(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group{refusal}.")
            batch.append((classic_records_key(group_id), None))
            return consumer_group_from_classic(classic, self.lookup_topic, self.clock.now_ms(), batch)
        if not create:
            raise Refused(E.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        if classic is not None and classic.protocol_type is not None:
            # An empty classic group becomes a consumer group; its offsets stay (Kafka deletes the
            # empty classic group's metadata record, not its offsets).
            from reference_broker.coordinator.group import records as classic_records

            batch.append((classic_records.group_key(group_id), None))
        return ConsumerGroup(group_id, self.clock.now_ms())

    def _check_epoch(self, member: ConsumerGroupMember, received: int, owned: Assignment | None) -> None:
        if received > member.member_epoch:
            raise Refused(
                E.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({received}) than the one known by"
                f" the group coordinator ({member.member_epoch}). The member must abandon all its"
                " partitions and rejoin.",
            )
        if received < member.member_epoch:
            subset = owned is not None and all(
                parts <= member.assigned.get(topic_id, frozenset()) for topic_id, parts in owned.items()
            )
            if received != member.previous_member_epoch or not subset:
                raise Refused(
                    E.FENCED_MEMBER_EPOCH,
                    f"The consumer group member has a smaller member epoch ({received}) than the one known"
                    f" by the group coordinator ({member.member_epoch}). The member must abandon all its"
                    " partitions and rejoin.",
                )

    def _resolve_member(
        self, group: ConsumerGroup, a: HeartbeatArgs, member_id: str
    ) -> tuple[ConsumerGroupMember, str | None]:
        """(the member before this heartbeat, id of a static member it replaces)."""
        joining = a.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        if a.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise Refused(
                        E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}."
                    )
                return ConsumerGroupMember(member_id), None
            if joining:
                # Rejoining with its id (after being fenced, KIP-1082): it gave up every partition.
                return dataclasses.replace(
                    member,
                    member_epoch=0,
                    previous_member_epoch=0,
                    state=MemberState.STABLE,
                    assigned={},
                    pending_revocation={},
                ), None
            self._check_epoch(member, a.member_epoch, a.owned)
            return member, None
        existing_id = group.static_members.get(a.instance_id)
        existing = group.members.get(existing_id) if existing_id is not None else None
        if joining:
            if existing is None:
                return ConsumerGroupMember(member_id, instance_id=a.instance_id), None
            if existing.member_id == member_id:
                return dataclasses.replace(
                    existing,
                    member_epoch=0,
                    previous_member_epoch=0,
                    state=MemberState.STABLE,
                    assigned={},
                    pending_revocation={},
                ), None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise Refused(
                    E.UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {a.instance_id} cannot join the group"
                    f" because the instance id is owned by {existing.member_id} member.",
                )
            # The static member comes back under a new member id and keeps its partitions.
            replacement = dataclasses.replace(
                existing, member_id=member_id, member_epoch=0, previous_member_epoch=0, pending_revocation={}
            )
            return replacement, existing.member_id
        if existing is None:
            raise Refused(E.UNKNOWN_MEMBER_ID, f"Instance id {a.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise Refused(
                E.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {a.instance_id} was fenced by member"
                f" {existing.member_id}.",
            )
        self._check_epoch(existing, a.member_epoch, a.owned)
        return existing, None

    def _subscription_metadata(self, names: set[str]) -> dict[str, TopicInfo]:
        found = {}
        for name in sorted(names):
            info = self.lookup_topic(name)
            if info is not None:
                found[name] = info
        return found

    def _heartbeat(self, a: HeartbeatArgs, classic: ClassicJoin | None = None) -> HeartbeatAnswer:
        batch: list[rec.Record] = []
        joining = a.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        group = self._group_for(a.group_id, joining, batch)
        member_id = a.member_id or kafka_uuid_string()
        if len(group.members) >= self.config.max_size and member_id not in group.members:
            raise Refused(
                E.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {self.config.max_size} members.",
            )
        replaced_id: str | None
        if classic is None:
            member, replaced_id = self._resolve_member(group, a, member_id)
        else:
            # A classic member is not epoch-checked at JoinGroup: it is created or updated, and a
            # static one joining under a new member id takes its instance's place and partitions.
            found = group.members.get(member_id)
            if found is not None and not found.uses_classic_protocol:
                raise Refused(E.UNKNOWN_MEMBER_ID, f"Member {member_id} does not use the classic protocol.")
            existing_id = group.static_members.get(a.instance_id) if a.instance_id is not None else None
            existing = group.members.get(existing_id) if existing_id is not None else None
            if found is None and existing is not None:
                member = dataclasses.replace(
                    existing,
                    member_id=member_id,
                    member_epoch=0,
                    previous_member_epoch=0,
                    pending_revocation={},
                )
                replaced_id = existing.member_id
            else:
                member, replaced_id = found or ConsumerGroupMember(member_id, instance_id=a.instance_id), None
        is_new = member_id not in group.members
        updated = dataclasses.replace(
            member,
            instance_id=a.instance_id if a.instance_id is not None else member.instance_id,
            rack_id=a.rack_id if a.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=a.rebalance_timeout_ms
            if a.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=a.server_assignor if a.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(
                tuple(a.subscribed_topic_names)
                if a.subscribed_topic_names is not None
                else member.subscribed_topic_names
            ),
            # An empty regex clears the member's regex subscription.
            subscribed_topic_regex=(
                (a.subscribed_topic_regex or None)
                if a.subscribed_topic_regex is not None
                else member.subscribed_topic_regex
            ),
            client_id=a.client_id,
            client_host=a.client_host,
        )
        # A member's protocol is the one of its latest request (a classic member may switch).
        updated = dataclasses.replace(
            updated,
            classic_session_timeout_ms=classic.session_timeout_ms if classic is not None else None,
            classic_protocols=tuple(classic.protocols) if classic is not None else (),
        )
        bump = False
        if is_new or updated.subscription() != member.subscription():
            batch.append(rec.member_record(group.group_id, updated))
            # A static member taking over its instance's place changes no subscription (no epoch bump).
            joined = is_new and replaced_id is None
            bump = joined or group.member_topics(updated) != group.member_topics(member)
        names = group.subscribed_topic_names(without=member_id) | group.member_topics(updated)
        if replaced_id is not None:
            batch[:0] = rec.member_tombstones(group.group_id, replaced_id)
            names = {
                n for mid, m in group.members.items() if mid != replaced_id for n in group.member_topics(m)
            }
            names |= group.member_topics(updated)
        metadata = self._subscription_metadata(names)
        topics_hash = rec.metadata_hash(metadata)
        if topics_hash != group.metadata_hash:
            bump = True
        group_epoch = group.group_epoch + 1 if bump else group.group_epoch
        if bump:
            batch += self._epoch_records(group, group_epoch, topics_hash)
        targets = group.target
        assignment_epoch = group.assignment_epoch
        if replaced_id is not None and group_epoch == group.assignment_epoch:
            targets = {mid: t for mid, t in group.target.items() if mid != replaced_id}
            targets[member_id] = group.target.get(replaced_id, {})
            batch.append(rec.target_record(group.group_id, member_id, targets[member_id]))
        if group_epoch > group.assignment_epoch:
            members = {mid: m for mid, m in group.members.items() if mid not in (replaced_id, member_id)}
            members[member_id] = updated
            targets = self._assign(group, members, metadata, replaced_id)
            for mid in members:
                if not same_assignment(targets.get(mid, {}), group.target.get(mid, {})) or mid == member_id:
                    batch.append(rec.target_record(group.group_id, mid, targets.get(mid, {})))
            batch.append(rec.target_epoch_record(group.group_id, group_epoch))
            assignment_epoch = group_epoch

        def partition_epoch(topic_id: uuid.UUID, partition: int) -> int:
            owner = group.partition_owners.get((topic_id, partition))
            if owner is None or owner[0] in (replaced_id, member_id):
                return -1
            return owner[1]

        try:
            reconciled = reconcile(
                updated,
                assignment_epoch,
                targets.get(member_id, {}),
                partition_epoch,
                a.owned if classic is None else classic.owned,
            )
        except FencedMemberEpoch as fenced:
            raise Refused(E.FENCED_MEMBER_EPOCH, str(fenced)) from None
        if is_new or reconciled.assignment_state() != member.assignment_state():
            batch.append(rec.current_record(group.group_id, reconciled))
        error = self.membership.write_records(group.group_id, batch)
        if error:
            raise Refused(error, "The coordinator could not write the group's records.")
        # Applied only now that the records are stored.
        self.groups[group.group_id] = group
        upgraded_from = self.membership.groups.get(group.group_id)
        self._ensure_offsets_holder(group.group_id)
        if group.converted_members:
            # The classic group became this consumer group: its members live on here.
            assert upgraded_from is not None
            self.membership.retire_classic_members(upgraded_from)
            for converted in group.converted_members:
                self._schedule_session_timeout(group, converted)
            group.converted_members = []
        if replaced_id is not None:
            group.remove_member(replaced_id)
        group.update_member(reconciled)
        group.group_epoch = group_epoch
        group.subscription_metadata = metadata
        if bump:
            group.metadata_hash = topics_hash
            group.has_partition_metadata_record = False
        if targets is not group.target:
            group.target = dict(targets)
            group.assignment_epoch = assignment_epoch
        self._schedule_session_timeout(group, member_id)
        if reconciled.subscribed_topic_regex != member.subscribed_topic_regex or self._regex_stale(
            group, reconciled.subscribed_topic_regex
        ):
            self._schedule_regex_resolution(group)
        if reconciled.state == MemberState.UNREVOKED_PARTITIONS:
            if (
                member.state != MemberState.UNREVOKED_PARTITIONS
                or reconciled.member_epoch != member.member_epoch
            ):
                self._schedule_rebalance_timeout(group, reconciled)
        else:
            timer = group.rebalance_timers.pop(member_id, None)
            if timer is not None:
                timer.cancel()
        full = joining or (
            a.rebalance_timeout_ms != -1 and a.subscribed_topic_names is not None and a.owned is not None
        )
        changed = not same_assignment(reconciled.assigned, member.assigned) or is_new
        return HeartbeatAnswer(
            member_id=member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=dict(reconciled.assigned) if full or changed else None,
        )

    def _assign(
        self,
        group: ConsumerGroup,
        members: dict[str, ConsumerGroupMember],
        metadata: dict[str, TopicInfo],
        replaced_id: str | None,
    ) -> dict[str, Assignment]:
        votes: dict[str, int] = {}
        for m in members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        available = self._assignors()
        name = max(sorted(votes), key=lambda n: votes[n]) if votes else available[0]
        specs = {
            mid: MemberSpec(
                frozenset(metadata[n].topic_id for n in group.member_topics(m) if n in metadata),
                m.instance_id,
                group.target.get(
                    replaced_id
                    if replaced_id
                    and m.instance_id
                    and group.static_members.get(m.instance_id) == replaced_id
                    else mid,
                    {},
                ),
            )
            for mid, m in members.items()
        }
        topics = {t.topic_id: t.num_partitions for t in metadata.values()}
        try:
            return ASSIGNORS[name](specs, topics)
        except PartitionAssignorError as exc:
            raise Refused(
                E.UNKNOWN_SERVER_ERROR, f"Failed to compute a new target assignment: {exc}"
            ) from None

    def _ensure_offsets_holder(self, group_id: str) -> None:
        from reference_broker.coordinator.group.state import Group

        holder = self.membership.groups.get(group_id)
        if holder is None:
            self.membership.groups[group_id] = Group(group_id, self.clock.now_ms())
        elif holder.protocol_type is not None:
            holder.protocol_type = None
            holder.protocol_name = None
            holder.generation = 0

    # -- leaving and fencing ---------------------------------------------------------------

    def _leave(self, a: HeartbeatArgs) -> HeartbeatAnswer:
        group = self.groups.get(a.group_id)
        if group is None:
            raise Refused(E.GROUP_ID_NOT_FOUND, f"Group {a.group_id} not found.")
        answer = HeartbeatAnswer(member_id=a.member_id, member_epoch=a.member_epoch)
        if a.instance_id is None:
            member = group.members.get(a.member_id)
            if member is None:
                raise Refused(
                    E.UNKNOWN_MEMBER_ID, f"Member {a.member_id} is not a member of group {a.group_id}."
                )
            log.info("member %s left consumer group %s", a.member_id, a.group_id)
            self._fence(group, member)
            return answer
        existing_id = group.static_members.get(a.instance_id)
        member = group.members.get(existing_id) if existing_id is not None else None
        if member is None:
            raise Refused(E.UNKNOWN_MEMBER_ID, f"Instance id {a.instance_id} is unknown.")
        if member.member_id != a.member_id:
            raise Refused(
                E.FENCED_INSTANCE_ID,
                f"Static member {a.member_id} with instance id {a.instance_id} was fenced by member"
                f" {member.member_id}.",
            )
        if a.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # Gone for now: it keeps its partitions (nobody else gets them) until its session ends.
            away = dataclasses.replace(
                member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={}
            )
            error = self.membership.write_records(group.group_id, [rec.current_record(group.group_id, away)])
            if error:
                raise Refused(error, "The coordinator could not write the group's records.")
            group.update_member(away)
            return answer
        self._fence(group, member)
        return answer

    def _fence(self, group: ConsumerGroup, member: ConsumerGroupMember) -> int:
        """Remove the member: its partitions are free and the group epoch goes up, so the next
        heartbeat of any other member computes a new target assignment. When only classic members
        remain and the policy allows, the group becomes a classic group instead."""
        classic_max = self.membership.config.max_group_size
        if not downgrade_refusal(group, member.member_id, self.migration_policy, classic_max):
            return self._downgrade(group, member.member_id)
        batch = rec.member_tombstones(group.group_id, member.member_id)
        unused = set(group.resolved_regexes) - group.regexes_in_use(without=member.member_id)
        batch += [rec.regex_tombstone(group.group_id, regex) for regex in sorted(unused)]
        names = group.subscribed_topic_names(without=member.member_id)
        metadata = self._subscription_metadata(names)
        topics_hash = rec.metadata_hash(metadata)
        batch += self._epoch_records(group, group.group_epoch + 1, topics_hash)
        error = self.membership.write_records(group.group_id, batch)
        if error:
            raise Refused(error, "The coordinator could not write the group's records.")
        group.remove_member(member.member_id)
        for regex in unused:
            del group.resolved_regexes[regex]
        group.subscription_metadata = metadata
        group.metadata_hash = topics_hash
        group.has_partition_metadata_record = False
        group.group_epoch += 1
        return 0

    def _downgrade(self, group: ConsumerGroup, leaving_id: str, *, rebalance: bool = True) -> int:
        """The group becomes a classic group without ``leaving_id`` ("" for none); ``rebalance``
        makes its members rejoin (a leave changes the membership; a static replacement does not)."""
        classic = classic_group_from_consumer(
            group, leaving_id, self._topic_names_by_id(group), self.clock.now_ms()
        )
        batch: list[rec.Record] = []
        for member_id in group.members:
            batch += rec.member_tombstones(group.group_id, member_id)
        batch += [rec.regex_tombstone(group.group_id, regex) for regex in sorted(group.resolved_regexes)]
        batch += rec.group_tombstones(group.group_id)
        error = self.membership.adopt_downgraded(classic, batch, rebalance=rebalance)
        if error:
            raise Refused(error, "The coordinator could not write the group's records.")
        group.cancel_timers()
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        log.info("consumer group %s downgraded to a classic group", group.group_id)
        return 0

    @staticmethod
    def _topic_names_by_id(group: ConsumerGroup) -> Callable[[uuid.UUID], str | None]:
        by_id = {info.topic_id: name for name, info in group.subscription_metadata.items()}
        return by_id.get

    # -- regular expression subscriptions ----------------------------------------------------

    def _regex_stale(self, group: ConsumerGroup, regex: str | None) -> bool:
        """The member's regex was never resolved, or was resolved long enough ago (Kafka's minimum
        refresh interval) against topic names that have changed since."""
        if not regex:
            return False
        resolved = group.resolved_regexes.get(regex)
        if resolved is None:
            return True
        if self.clock.now_ms() - resolved.timestamp_ms < REGEX_REFRESH_MIN_INTERVAL_MS:
            return False
        return rec.topic_names_version(self.topic_names()) != resolved.version

    def _schedule_regex_resolution(self, group: ConsumerGroup) -> None:
        """Resolve the group's regexes after this heartbeat is answered, as Kafka does off the
        request path; a heartbeat never waits for a resolution."""
        if group.regex_resolution_pending:
            return
        group.regex_resolution_pending = True
        self.clock.call_later(0, lambda: self._resolve_regexes(group.group_id, group))

    def _resolve_regexes(self, group_id: str, scheduled_for: ConsumerGroup) -> None:
        """Match every regex the members subscribe with against the topic names; write what changed
        (ConsumerGroupRegularExpression records, tombstones of regexes no member uses) and bump the
        group epoch when a member's topics changed, so the next heartbeat computes a new target."""
        scheduled_for.regex_resolution_pending = False
        group = self.groups.get(group_id)
        if group is not scheduled_for:
            return
        names = self.topic_names()
        version, now = rec.topic_names_version(names), self.clock.now_ms()
        resolved: dict[str, ResolvedRegex] = {}
        batch: list[rec.Record] = []
        changed = False
        for regex in sorted(group.regexes_in_use()):
            try:
                pattern = compile_client_pattern(regex)
            except InvalidPatternError:
                log.warning("consumer group %s: regex %r no longer compiles; ignored", group_id, regex)
                continue
            found = ResolvedRegex(frozenset(n for n in names if pattern.matches(n)), version, now)
            resolved[regex] = found
            old = group.resolved_regexes.get(regex)
            if old is None or old.topics != found.topics:
                changed = True
                batch.append(rec.regex_record(group_id, regex, found))
        unused = sorted(set(group.resolved_regexes) - set(resolved))
        batch += [rec.regex_tombstone(group_id, regex) for regex in unused]
        previous = group.resolved_regexes
        group.resolved_regexes = resolved
        metadata = self._subscription_metadata(group.subscribed_topic_names())
        topics_hash = rec.metadata_hash(metadata)
        group.resolved_regexes = previous
        bump = changed or topics_hash != group.metadata_hash
        if bump:
            batch += self._epoch_records(group, group.group_epoch + 1, topics_hash)
        if batch:
            error = self.membership.write_records(group_id, batch)
            if error:
                log.warning(
                    "consumer group %s: regex resolution not written (error %d); the next heartbeat retries",
                    group_id,
                    error,
                )
                return
        group.resolved_regexes = resolved
        if bump:
            group.group_epoch += 1
            group.subscription_metadata = metadata
            group.metadata_hash = topics_hash
            group.has_partition_metadata_record = False
            log.info("consumer group %s: regexes resolved, group epoch %d", group_id, group.group_epoch)

    @staticmethod
    def _epoch_records(group: ConsumerGroup, epoch: int, topics_hash: int) -> list[rec.Record]:
        """The group epoch record (with the topics' hash), after the tombstone of a subscribed
        topics record of the layout before Kafka 4.1 if the group still has one."""
        out = [rec.topics_tombstone(group.group_id)] if group.has_partition_metadata_record else []
        out.append(rec.epoch_record(group.group_id, epoch, topics_hash))
        return out

    def _fence_if(
        self, group_id: str, member_id: str, why: str, still: Callable[[ConsumerGroupMember], bool]
    ) -> None:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None or self.groups.get(group_id) is not group or not still(member):
            return
        log.info("member %s of consumer group %s fenced: %s", member_id, group_id, why)
        try:
            self._fence(group, member)
        except Refused:
            log.warning(
                "fencing member %s of consumer group %s failed; retried at its next timeout",
                member_id,
                group_id,
            )
            self._schedule_session_timeout(group, member_id)

    def _schedule_session_timeout(self, group: ConsumerGroup, member_id: str) -> None:
        timer = group.session_timers.pop(member_id, None)
        if timer is not None:
            timer.cancel()
        member = group.members.get(member_id)
        classic_timeout = member.classic_session_timeout_ms if member is not None else None
        group.session_timers[member_id] = self.clock.call_later(
            self.config.session_timeout_ms if classic_timeout is None else classic_timeout,
            lambda: self._fence_if(group.group_id, member_id, "the member session expired", lambda m: True),
        )

    def _schedule_rebalance_timeout(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        timer = group.rebalance_timers.pop(member.member_id, None)
        if timer is not None:
            timer.cancel()
        epoch = member.member_epoch

        def still_revoking(m: ConsumerGroupMember) -> bool:
            return m.state == MemberState.UNREVOKED_PARTITIONS and m.member_epoch == epoch

        group.rebalance_timers[member.member_id] = self.clock.call_later(
            max(member.rebalance_timeout_ms, 0),
            lambda: self._fence_if(
                group.group_id,
                member.member_id,
                "the member failed to revoke partitions in time",
                still_revoking,
            ),
        )

    # -- offsets, admin and loading ----------------------------------------------------------

    def validate_offset_commit(
        self, group_id: str, member_id: str, member_epoch: int, *, transactional: bool, api_version: int
    ) -> int:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``: 0, or the error of the whole commit."""
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            return 0
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        classic = member.uses_classic_protocol
        if not transactional and api_version < 9 and not classic:
            return E.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            return E.ILLEGAL_GENERATION if transactional or classic else E.STALE_MEMBER_EPOCH
        return 0

    def validate_offset_fetch(
        self, group_id: str, member_id: str | None, member_epoch: int, *, require_stable: bool = False
    ) -> int:
        """Kafka's ``ConsumerGroup.validateOffsetFetch``: the member and its epoch as committed
        (a read operation), or as written last with ``require_stable`` (Kafka's write operation)."""
        group = self.groups.get(group_id) if require_stable else self.committed.group(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return 0
        member = group.members.get(member_id or "")
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        return E.STALE_MEMBER_EPOCH if member_epoch != member.member_epoch else 0

    def delete_group(self, group: ConsumerGroup) -> int:
        """DeleteGroups of a consumer group (NON_EMPTY_GROUP while it has members)."""
        if group.members:
            return E.NON_EMPTY_GROUP
        error = self.membership.write_records(group.group_id, rec.group_tombstones(group.group_id))
        if error:
            return error
        group.cancel_timers()
        del self.groups[group.group_id]
        return 0

    def load(self, replay: rec.ConsumerGroupReplay, committed: rec.ConsumerGroupReplay | None = None) -> None:
        """A partition's groups as ``replay`` read them (to the log end); the committed view
        starts from ``committed``, the records of them already committed (all when None)."""
        built, deleted = replay.groups(self.clock.now_ms())
        self.committed.loaded(replay if committed is None else committed)
        for group_id in deleted:
            old = self.groups.pop(group_id, None)
            if old is not None:
                old.cancel_timers()
        for group_id, group in built.items():
            old = self.groups.pop(group_id, None)
            if old is not None:
                old.cancel_timers()
            self.groups[group_id] = group
            self._ensure_offsets_holder(group_id)
            for member_id in group.members:
                self._schedule_session_timeout(group, member_id)

    def shutdown(self) -> None:
        for group in self.groups.values():
            group.cancel_timers()
        self.groups.clear()
        self.committed.clear()

    def unload(self, moved: Callable[[str], bool]) -> None:
        """Drop the groups ``moved`` names (their partition's leadership went to another node)."""
        for group_id in [g for g in self.groups if moved(g)]:
            self.groups.pop(group_id).cancel_timers()
        self.committed.unload(moved)
