"""Topics and partitions on the active controller: Kafka's ReplicationControlManager.

Every operation reads the controller's latest image and returns the records that make the change
with the answer to give once they are committed; validation and error codes follow Kafka's
controller (and its messages where clients show them). Leader election and ISR changes go
through ``PartitionChangeBuilder``; a broker may lead only when it is registered, unfenced and
not shutting down. Unclean election happens only for topics (or a cluster) with
``unclean.leader.election.enable``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from reference_broker import internal_records as rec
from reference_broker.controller.partition_change import Election, PartitionChangeBuilder
from reference_broker.controller.placement import PlacementError, UsableBroker
from reference_broker.controller.result import ControllerResult
from reference_broker.metadata.image import (
    CONFIG_TOPIC,
    NO_LEADER,
    RECOVERED,
    RECOVERING,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AlterPartitionReassignmentsResponse,
    AlterPartitionResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    ElectLeadersResponse,
    ListPartitionReassignmentsResponse,
)

if TYPE_CHECKING:
    from reference_broker.controller.quorum_controller import QuorumController

UNCLEAN_KEY = "unclean.leader.election.enable"
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1
MAX_PARTITIONS_PER_REQUEST = 10_000


class _Refused(Exception):
    def __init__(self, code: int, message: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message


def _topic_name_problem(name: str) -> str | None:
    from reference_broker.handlers.common import topic_name_problem

    return topic_name_problem(name)


class ReplicationControl:
    def __init__(self, controller: QuorumController):
        self.controller = controller

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    # -- helpers -----------------------------------------------------------------------------------
    def unclean_allowed(self, topic: str, image: MetadataImage | None = None) -> bool:
        value = (image or self.image).topic_config(topic).get(UNCLEAN_KEY)
        if value is not None:
            return value.lower() == "true"
        return self.controller.settings.unclean_leader_election

    def _builder(
        self, image: MetadataImage, topic: TopicImage, partition_id: int, exclude: int | None = None
    ) -> PartitionChangeBuilder:
        def acceptable(broker_id: int) -> bool:
            return broker_id != exclude and image.is_active(broker_id)

        builder = PartitionChangeBuilder(topic.partitions[partition_id], topic.id, partition_id, acceptable)
        if self.unclean_allowed(topic.name, image):
            builder.set_election(Election.UNCLEAN)
        return builder

    def _partitions(self, image: MetadataImage) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
        for topic in image.topics_by_id.values():
            for partition_id, part in sorted(topic.partitions.items()):
                yield topic, partition_id, part

    def leave_partitions(self, broker_id: int, image: MetadataImage | None = None) -> list[Any]:
        """Records taking ``broker_id`` out of every ISR and leadership (fencing, shutdown, unclean
        restart); partitions it led get a new leader from their remaining ISR."""
        image = image or self.image
        records: list[Any] = []
        for topic, partition_id, part in self._partitions(image):
            if broker_id not in part.isr and part.leader != broker_id:
                continue
            builder = self._builder(image, topic, partition_id, exclude=broker_id)
            builder.set_target_isr([r for r in part.isr if r != broker_id])
            record = builder.build()
            if record is not None:
                records.append(record)
        return records

    def elect_for_unfenced(self, broker_id: int, image: MetadataImage) -> list[Any]:
        """Records electing leaders for leaderless partitions ``broker_id`` can now lead."""
        records: list[Any] = []
        for topic, partition_id, part in self._partitions(image):
            if part.leader == NO_LEADER and broker_id in part.replicas:
                record = self._builder(image, topic, partition_id).build()
                if record is not None:
                    records.append(record)
        return records

    def rebalance_leaders(self) -> list[Any]:
        """Preferred elections for partitions whose preferred replica could lead but does not
        (``auto.leader.rebalance.enable``)."""
        image = self.image
        records: list[Any] = []
        for topic, partition_id, part in self._partitions(image):
            preferred = part.preferred_leader
            if part.leader != preferred and preferred in part.isr and image.is_active(preferred):
                builder = self._builder(image, topic, partition_id).set_election(Election.PREFERRED)
                record = builder.build()
                if record is not None:
                    records.append(record)
        return records

    def _usable_brokers(self, image: MetadataImage) -> list[UsableBroker]:
        return [
            UsableBroker(b.id, b.rack, b.fenced)
            for b in image.brokers.values()
            if not b.in_controlled_shutdown
        ]

    def _partition_records(
        self, image: MetadataImage, topic_id: uuid.UUID, first: int, assignments: list[list[int]]
    ) -> list[Any]:
        records = []
        for offset, replicas in enumerate(assignments):
            isr = [r for r in replicas if image.is_active(r)]
            if not isr:
                raise _Refused(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"Unable to replicate the partition {len(replicas)} time(s): "
                    "All brokers are currently fenced.",
                )
            records.append(
                rec.PartitionRecord(
                    partition_id=first + offset,
                    topic_id=topic_id,
                    replicas=list(replicas),
                    isr=isr,
                    removing_replicas=[],
                    adding_replicas=[],
                    leader=isr[0],
                    leader_recovery_state=RECOVERED,
                    leader_epoch=0,
                    partition_epoch=0,
                    directories=[],
                )
            )
        return records

    def _manual_assignment(self, image: MetadataImage, replicas: list[int], partition: int) -> list[int]:
        if not replicas:
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.",
            )
        if len(set(replicas)) != len(replicas):
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {_duplicate(replicas)} more than once.",
            )
        for r in replicas:
            if r not in image.brokers:
                raise _Refused(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {r}, but no such broker is registered.",
                )
        if not any(image.is_active(r) for r in replicas):
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"All brokers specified in the manual partition assignment for partition {partition} "
                "are fenced or in controlled shutdown.",
            )
        return list(replicas)

    # -- CreateTopics ---------------------------------------------------------------------------------
    def create_topics(self, request: Any) -> ControllerResult:
        image = self.image
        results = []
        records: list[Any] = []
        counts: dict[str, int] = {}
        for t in request.topics:
            counts[t.name] = counts.get(t.name, 0) + 1
        for t in request.topics:
            result = CreateTopicsResponse.CreatableTopicResult(name=t.name)
            results.append(result)
            try:
                if counts[t.name] > 1:
                    raise _Refused(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                topic_records, topic_id, num_partitions, rf = self._create_topic(image, t)
            except _Refused as refused:
                result.error_code = refused.code
                result.error_message = refused.message
                continue
            except PlacementError as refused:
                result.error_code = refused.code
                result.error_message = refused.message
                continue
            result.num_partitions = num_partitions
            result.replication_factor = rf
            result.configs = [
                CreateTopicsResponse.CreatableTopicResult.CreatableTopicConfigs(
                    name=c.name, value=c.value, read_only=False, config_source=1, is_sensitive=False
                )
                for c in t.configs
            ]
            if not request.validate_only:
                result.topic_id = topic_id
                records += topic_records
                image = self.controller.preview(records)
        return ControllerResult(records, CreateTopicsResponse(topics=results))

    def _create_topic(self, image: MetadataImage, t: Any) -> tuple[list[Any], uuid.UUID, int, int]:
        problem = _topic_name_problem(t.name)
        if problem:
            raise _Refused(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if image.topic(t.name) is not None:
            raise _Refused(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
        settings = self.controller.settings
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                raise _Refused(
                    ErrorCode.INVALID_REQUEST,
                    "A manual partition assignment was specified, but numPartitions or replicationFactor "
                    "was not set to -1.",
                )
            assignments = []
            for expected, a in enumerate(sorted(t.assignments, key=lambda a: a.partition_index)):
                if a.partition_index != expected:
                    raise _Refused(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        "Partitions should be a consecutive 0-based integer sequence, but "
                        f"{a.partition_index} "
                        f"was found where {expected} was expected.",
                    )
                assignments.append(self._manual_assignment(image, list(a.broker_ids), a.partition_index))
            if len({len(a) for a in assignments}) > 1:
                raise _Refused(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "All partitions in the manual partition assignment must have the same number of "
                    "replicas.",
                )
            num_partitions, rf = len(assignments), len(assignments[0])
        else:
            num_partitions = settings.default_num_partitions if t.num_partitions == -1 else t.num_partitions
            rf = settings.default_replication_factor if t.replication_factor == -1 else t.replication_factor
            if num_partitions <= 0:
                raise _Refused(
                    ErrorCode.INVALID_PARTITIONS,
                    "Number of partitions was set to an invalid non-positive value.",
                )
            if rf <= 0:
                raise _Refused(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            if num_partitions > MAX_PARTITIONS_PER_REQUEST:
                raise _Refused(
                    ErrorCode.POLICY_VIOLATION,
                    "Excessively large number of partitions per request.",
                )
            assignments = self.controller.placer.place(self._usable_brokers(image), num_partitions, rf)
        from reference_broker.handlers.configs import check_topic_overrides

        overrides = {c.name: c.value for c in t.configs}
        try:
            check_topic_overrides(overrides, settings.log_defaults)
        except ValueError as exc:
            raise _Refused(ErrorCode.INVALID_CONFIG, str(exc)) from None
        topic_id = uuid.uuid4()
        records: list[Any] = [rec.TopicRecord(name=t.name, topic_id=topic_id)]
        for c in t.configs:
            if c.value is None:  # no override: nothing to record
                continue
            records.append(
                rec.ConfigRecord(resource_type=CONFIG_TOPIC, resource_name=t.name, name=c.name, value=c.value)
            )
        records += self._partition_records(image, topic_id, 0, assignments)
        return records, topic_id, num_partitions, rf

    # -- CreatePartitions ------------------------------------------------------------------------------
    def create_partitions(self, request: Any) -> ControllerResult:
        image = self.image
        records: list[Any] = []
        results = []
        for t in request.topics:
            result = CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name)
            results.append(result)
            try:
                topic_records = self._create_partitions(image, t)
            except (_Refused, PlacementError) as refused:
                result.error_code = refused.code
                result.error_message = refused.message
                continue
            if not request.validate_only:
                records += topic_records
                image = self.controller.preview(records)
        return ControllerResult(records, CreatePartitionsResponse(results=results))

    def _create_partitions(self, image: MetadataImage, t: Any) -> list[Any]:
        topic = image.topic(t.name)
        if topic is None:
            raise _Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
        current = len(topic.partitions)
        if t.count < current:
            raise _Refused(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {t.name} currently has {current} partition(s); {t.count} would not be an "
                "increase.",
            )
        if t.count == current:
            raise _Refused(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        added = t.count - current
        if added > MAX_PARTITIONS_PER_REQUEST:
            raise _Refused(
                ErrorCode.UNKNOWN_SERVER_ERROR, "Excessively large number of partitions per request."
            )
        rf = len(topic.partitions[0].replicas)
        if t.assignments:  # null and empty both mean "place them"
            if len(t.assignments) != added:
                raise _Refused(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Attempted to add {added} additional partition(s), but only {len(t.assignments)} "
                    "assignment(s) were specified.",
                )
            assignments = []
            for index, a in enumerate(t.assignments):
                replicas = self._manual_assignment(image, list(a.broker_ids), current + index)
                if len(replicas) != rf:
                    raise _Refused(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes a partition with {len(replicas)} "
                        f"replica(s), but this is not consistent with previous partitions, which have {rf} "
                        "replica(s).",
                    )
                assignments.append(replicas)
        else:
            assignments = self.controller.placer.place(self._usable_brokers(image), added, rf)
        return self._partition_records(image, topic.id, current, assignments)

    # -- DeleteTopics ----------------------------------------------------------------------------------
    def delete_topics(self, request: Any, version: int) -> ControllerResult:
        image = self.image
        wanted: list[tuple[str | None, uuid.UUID | None]] = []
        if version >= 6:
            wanted = [(t.name, None if t.name is not None else t.topic_id) for t in request.topics]
        else:
            wanted = [(name, None) for name in request.topic_names]
        records: list[Any] = []
        results = []
        removed: set[uuid.UUID] = set()
        for name, topic_id in wanted:
            result = DeleteTopicsResponse.DeletableTopicResult(
                name=name, topic_id=topic_id or uuid.UUID(int=0)
            )
            results.append(result)
            topic = image.topic(name) if name is not None else image.topics_by_id.get(topic_id)  # type: ignore[arg-type]
            if topic is None:
                result.error_code = (
                    ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                continue
            result.name, result.topic_id = topic.name, topic.id
            if not self.controller.settings.delete_topic_enable:
                result.error_code = ErrorCode.TOPIC_DELETION_DISABLED
                continue
            if topic.id not in removed:
                removed.add(topic.id)
                records.append(rec.RemoveTopicRecord(topic_id=topic.id))
        return ControllerResult(records, DeleteTopicsResponse(responses=results))

    # -- AlterPartition ---------------------------------------------------------------------------------
    def alter_partition(self, request: Any, version: int) -> ControllerResult:
        image = self.image
        broker = image.brokers.get(request.broker_id)
        if broker is None or broker.epoch != request.broker_epoch:
            return ControllerResult([], AlterPartitionResponse(error_code=ErrorCode.STALE_BROKER_EPOCH))
        records: list[Any] = []
        topics = []
        for t in request.topics:
            by_id = version >= 2
            topic = image.topics_by_id.get(t.topic_id) if by_id else image.topic(t.topic_name)
            response_topic = AlterPartitionResponse.TopicData(topic_name=t.topic_name, topic_id=t.topic_id)
            topics.append(response_topic)
            for p in t.partitions:
                entry = AlterPartitionResponse.TopicData.PartitionData(partition_index=p.partition_index)
                response_topic.partitions.append(entry)
                if topic is None:
                    entry.error_code = (
                        ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                    continue
                part = topic.partitions.get(p.partition_index)
                new_isr = [b.broker_id for b in p.new_isr_with_epochs] if version >= 3 else list(p.new_isr)
                epochs = (
                    [b.broker_epoch for b in p.new_isr_with_epochs] if version >= 3 else [-1] * len(new_isr)
                )
                code = self._validate_alter(image, request.broker_id, part, p, new_isr, epochs, version)
                if code != ErrorCode.NONE or part is None:
                    entry.error_code = code
                    continue
                builder = self._builder(image, topic, p.partition_index)
                builder.set_target_isr(new_isr).set_target_recovery_state(p.leader_recovery_state)
                record = builder.build()
                if record is not None:
                    records.append(record)
                    image = self.controller.preview(records)
                    part = image.topics_by_id[topic.id].partitions[p.partition_index]
                    if record.leader not in (-2, request.broker_id):
                        entry.error_code = (
                            ErrorCode.NEW_LEADER_ELECTED if version > 1 else ErrorCode.FENCED_LEADER_EPOCH
                        )
                        continue
                entry.leader_id = part.leader
                entry.leader_epoch = part.leader_epoch
                entry.isr = list(part.isr)
                entry.leader_recovery_state = part.leader_recovery_state
                entry.partition_epoch = part.partition_epoch
        return ControllerResult(records, AlterPartitionResponse(topics=topics))

    def _validate_alter(
        self,
        image: MetadataImage,
        broker_id: int,
        part: PartitionRegistration | None,
        p: Any,
        new_isr: list[int],
        epochs: list[int],
        version: int,
    ) -> int:
        if part is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if p.leader_epoch > part.leader_epoch or p.partition_epoch > part.partition_epoch:
            return ErrorCode.NOT_CONTROLLER
        if p.leader_epoch < part.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if broker_id != part.leader:
            return ErrorCode.INVALID_REQUEST
        if p.partition_epoch < part.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        if len(set(new_isr)) != len(new_isr) or any(r not in part.replicas for r in new_isr) or not new_isr:
            return ErrorCode.INVALID_REQUEST
        if part.leader not in new_isr:
            return ErrorCode.INVALID_REQUEST
        if p.leader_recovery_state == RECOVERING and len(new_isr) > 1:
            return ErrorCode.INVALID_REQUEST
        if part.leader_recovery_state == RECOVERED and p.leader_recovery_state == RECOVERING:
            return ErrorCode.INVALID_REQUEST
        for replica, epoch in zip(new_isr, epochs, strict=True):
            reg = image.brokers.get(replica)
            if (
                reg is None
                or reg.in_controlled_shutdown
                or reg.fenced
                or (epoch != -1 and epoch != reg.epoch)
            ):
                return ErrorCode.INELIGIBLE_REPLICA if version > 1 else ErrorCode.OPERATION_NOT_ATTEMPTED
        return ErrorCode.NONE

    # -- ElectLeaders ------------------------------------------------------------------------------------
    def elect_leaders(self, request: Any) -> ControllerResult:
        image = self.image
        records: list[Any] = []
        results = []
        Result = ElectLeadersResponse.ReplicaElectionResult
        if request.election_type not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
            return ControllerResult([], ElectLeadersResponse(error_code=ErrorCode.INVALID_REQUEST))
        if request.topic_partitions is None:
            for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
                entry = Result(topic=topic.name)
                results.append(entry)
                for partition_id in sorted(topic.partitions):
                    code, message, image = self._elect(
                        image, topic.name, partition_id, request.election_type, records
                    )
                    if code != ErrorCode.ELECTION_NOT_NEEDED:
                        entry.partition_result.append(
                            Result.PartitionResult(
                                partition_id=partition_id, error_code=code, error_message=message
                            )
                        )
        else:
            for tp in request.topic_partitions:
                entry = Result(topic=tp.topic)
                results.append(entry)
                for partition_id in tp.partitions:
                    code, message, image = self._elect(
                        image, tp.topic, partition_id, request.election_type, records
                    )
                    entry.partition_result.append(
                        Result.PartitionResult(
                            partition_id=partition_id, error_code=code, error_message=message
                        )
                    )
        return ControllerResult(records, ElectLeadersResponse(replica_election_results=results))

    def _elect(
        self, image: MetadataImage, name: str, partition_id: int, election_type: int, records: list[Any]
    ) -> tuple[int, str | None, MetadataImage]:
        topic = image.topic(name)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}", image
        part = topic.partitions.get(partition_id)
        if part is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {name}-{partition_id}", image
        if (election_type == ELECTION_PREFERRED and part.leader == part.preferred_leader) or (
            election_type == ELECTION_UNCLEAN and part.has_leader()
        ):
            return ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.", image
        builder = self._builder(image, topic, partition_id)
        builder.set_election(Election.PREFERRED if election_type == ELECTION_PREFERRED else Election.UNCLEAN)
        record = builder.build()
        if record is None:
            if election_type == ELECTION_PREFERRED:
                return (
                    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                    "Failed to elect leader for partition: preferred replica is not available.",
                    image,
                )
            return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "Failed to elect leader for partition.", image
        records.append(record)
        return ErrorCode.NONE, None, self.controller.preview(records)

    # -- reassignments -----------------------------------------------------------------------------------
    def alter_reassignments(self, request: Any) -> ControllerResult:
        image = self.image
        records: list[Any] = []
        responses = []
        Topic = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
        for t in request.topics:
            entry = Topic(name=t.name)
            responses.append(entry)
            for p in t.partitions:
                code: int = ErrorCode.NONE
                message: str | None = None
                try:
                    record = self._reassign(image, t.name, p.partition_index, p.replicas, request)
                except _Refused as refused:
                    code, message = refused.code, refused.message
                else:
                    if record is not None:
                        records.append(record)
                        image = self.controller.preview(records)
                entry.partitions.append(
                    Topic.ReassignablePartitionResponse(
                        partition_index=p.partition_index, error_code=code, error_message=message
                    )
                )
        return ControllerResult(
            records, AlterPartitionReassignmentsResponse(error_message=None, responses=responses)
        )

    def _reassign(
        self, image: MetadataImage, name: str, partition_id: int, target: list[int] | None, request: Any
    ) -> Any:
        topic = image.topic(name)
        if topic is None:
            raise _Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {name}.")
        part = topic.partitions.get(partition_id)
        if part is None:
            raise _Refused(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {name}:{partition_id}."
            )
        builder = self._builder(image, topic, partition_id)
        if target is None:
            if not part.is_reassigning:
                raise _Refused(
                    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                    "No partition reassignment is in progress for the topic.",
                )
            replicas = [r for r in part.replicas if r not in part.adding_replicas]
            isr = [r for r in part.isr if r not in part.adding_replicas]
            if not isr and not self.unclean_allowed(name, image):
                raise _Refused(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Unable to revert partition assignment for {name}:{partition_id} because it would "
                    "require an unclean leader election.",
                )
            builder.set_target_replicas(replicas).set_target_isr(isr or list(part.isr))
            return builder.set_target_adding([]).set_target_removing([]).build()
        target = self._manual_assignment(image, list(target), partition_id)
        current = (
            [r for r in part.replicas if r not in part.adding_replicas]
            if part.is_reassigning
            else list(part.replicas)
        )
        if not getattr(request, "allow_replication_factor_change", True) and len(target) != len(current):
            raise _Refused(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                "The replication factor is changed from "
                f"{len(current)} to {len(target)} but allowReplicationFactorChange is false.",
            )
        removing = sorted(set(current) - set(target))
        adding = sorted(set(target) - set(current))
        builder.set_target_replicas(target + removing).set_target_removing(removing).set_target_adding(adding)
        return builder.build()

    def list_reassignments(self, request: Any) -> ControllerResult:
        image = self.image
        Topic = ListPartitionReassignmentsResponse.OngoingTopicReassignment
        topics = []

        def describe(topic: TopicImage, wanted: Callable[[int], bool]) -> None:
            ongoing = [
                Topic.OngoingPartitionReassignment(
                    partition_index=pid,
                    replicas=list(part.replicas),
                    adding_replicas=list(part.adding_replicas),
                    removing_replicas=list(part.removing_replicas),
                )
                for pid, part in sorted(topic.partitions.items())
                if part.is_reassigning and wanted(pid)
            ]
            if ongoing:
                topics.append(Topic(name=topic.name, partitions=ongoing))

        if request.topics is None:
            for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
                describe(topic, lambda _pid: True)
        else:
            for t in request.topics:
                found = image.topic(t.name)
                if found is not None:
                    indexes = set(t.partition_indexes)
                    describe(found, indexes.__contains__)
        return ControllerResult([], ListPartitionReassignmentsResponse(error_message=None, topics=topics))


def _duplicate(replicas: list[int]) -> int:
    seen: set[int] = set()
    for r in replicas:
        if r in seen:
            return r
        seen.add(r)
    return -1
