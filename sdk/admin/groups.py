"""Consumer groups and their offsets: ListGroups (to every broker), DescribeGroups, DeleteGroups,
OffsetFetch, OffsetCommit and OffsetDelete (to the group's coordinator, found with
FindCoordinator and looked up again on NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sdk.admin.results import ConsumerGroupDescription, ConsumerGroupListing, MemberDescription
from sdk.admin.routing import AdminRouter, Deadline, run_per_item
from sdk.admin.security import AclOperation
from sdk.admin.types import check_topic_partition
from sdk.client.cluster import TopicPartition
from sdk.client.coordinators import CoordinatorType
from sdk.consumer.assignors.protocol import decode_assignment
from sdk.consumer.records import OffsetAndMetadata
from sdk.errors import DecodeError, ErrorCode, KafkaError, make_error
from sdk.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
)

__all__ = [
    "alter_group_offsets",
    "check_broker_ids",
    "check_offsets",
    "delete_group_offsets",
    "delete_groups",
    "describe_groups",
    "list_group_offsets",
    "list_groups",
]

#: OffsetFetch v8+ asks for several groups at once; v10 and OffsetCommit v10 name topics by id,
#: which the admin client does not track, so both stay below it.
OFFSET_FETCH_GROUPS_VERSION = 8
OFFSET_MAX_VERSION = 9
#: ListGroups: states_filter from v4, types_filter from v5.
LIST_GROUPS_STATES_VERSION = 4
LIST_GROUPS_TYPES_VERSION = 5
#: DescribeGroups answers authorized_operations from v3.
DESCRIBE_GROUPS_OPERATIONS_VERSION = 3


def check_offsets(offsets: Mapping[Any, OffsetAndMetadata | int]) -> dict[TopicPartition, OffsetAndMetadata]:
    entries = {}
    for tp, entry in offsets.items():
        if isinstance(entry, int) and not isinstance(entry, bool):
            entry = OffsetAndMetadata(entry)
        if not isinstance(entry, OffsetAndMetadata) or entry.offset < 0:
            raise ValueError(f"offsets: {entry!r} for {tp!r} is not an offset >= 0 or an OffsetAndMetadata")
        entries[check_topic_partition(tp, "offsets")] = entry
    return entries


def check_broker_ids(values: Iterable[Any]) -> list[int]:
    ids = list(values)
    for value in ids:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"broker id: {value!r} is not a broker id")
    return ids


def _group_route(router: AdminRouter, group_id: str, coordinator: int | None = None) -> Any:
    async def route(_key: object) -> int:
        if coordinator is not None:
            return coordinator
        return await router.coordinator(CoordinatorType.GROUP, group_id)

    return route


async def list_groups(
    router: AdminRouter, deadline: Deadline, states: list[str], types: list[str], broker_ids: list[int] | None
) -> list[ConsumerGroupListing]:
    if broker_ids is None:
        response = await router.metadata([], deadline)
        brokers = sorted(b.node_id for b in response.brokers)
    else:
        brokers = sorted(set(broker_ids))
    min_version = LIST_GROUPS_TYPES_VERSION if types else LIST_GROUPS_STATES_VERSION if states else None

    async def route(node: int) -> int:
        return node

    async def send(node: int, _nodes: list[int]) -> dict[int, list[ConsumerGroupListing] | KafkaError]:
        request = ListGroupsRequest(states_filter=states, types_filter=types)
        answer, _ = await router.send(
            node, ListGroupsRequest.API_KEY, lambda _v: request, deadline, min_version=min_version
        )
        if answer.error_code:
            return {node: make_error(answer.error_code, f"ListGroups on broker {node}")}
        return {
            node: [
                ConsumerGroupListing(g.group_id, g.protocol_type, g.group_state or None, g.group_type or None)
                for g in answer.groups
            ]
        }

    answers = await run_per_item(router, brokers, deadline, route=route, send=send)
    listings: dict[str, ConsumerGroupListing] = {}
    for node in brokers:
        answer = answers[node]
        if isinstance(answer, KafkaError):
            raise answer
        for listing in answer:
            listings[listing.group_id] = listing
    return [listings[g] for g in sorted(listings)]


def _operations(bits: int) -> frozenset[AclOperation] | None:
    """DescribeGroups' authorized_operations bit field (INT32_MIN: not asked for)."""
    if bits == -(2**31):
        return None
    return frozenset(op for op in AclOperation if bits & (1 << int(op)))


def _member(member: Any) -> MemberDescription:
    assignment: frozenset[TopicPartition] = frozenset()
    if member.member_assignment:
        try:
            assignment = frozenset(
                TopicPartition(*tp) for tp in decode_assignment(member.member_assignment).partitions
            )
        except DecodeError:
            assignment = frozenset()  # not the consumer protocol (e.g. Connect): no partitions to show
    return MemberDescription(
        member.member_id, member.group_instance_id, member.client_id, member.client_host, assignment
    )


async def describe_groups(
    router: AdminRouter,
    group_ids: Sequence[str],
    deadline: Deadline,
    coordinator: int | None,
    include_authorized_operations: bool,
) -> dict[str, ConsumerGroupDescription]:
    async def route(group_id: str) -> int:
        if coordinator is not None:
            return coordinator
        return await router.coordinator(CoordinatorType.GROUP, group_id)

    async def send(node: int, ids: list[str]) -> dict[str, ConsumerGroupDescription | KafkaError]:
        request = DescribeGroupsRequest(
            groups=ids, include_authorized_operations=include_authorized_operations
        )
        response, _ = await router.send(
            node,
            DescribeGroupsRequest.API_KEY,
            lambda _v: request,
            deadline,
            min_version=DESCRIBE_GROUPS_OPERATIONS_VERSION if include_authorized_operations else None,
        )
        answers: dict[str, ConsumerGroupDescription | KafkaError] = {}
        for g in response.groups:
            if g.error_code:
                answers[g.group_id] = make_error(g.error_code, f"group {g.group_id!r}")
                continue
            members = tuple(_member(m) for m in g.members)
            found = (
                coordinator
                if coordinator is not None
                else router.coordinators.cached(CoordinatorType.GROUP, g.group_id)
            )
            answers[g.group_id] = ConsumerGroupDescription(
                g.group_id,
                g.group_state,
                g.protocol_type,
                g.protocol_data,
                members,
                -1 if found is None else found,
                authorized_operations=_operations(g.authorized_operations)
                if include_authorized_operations
                else None,
            )
        return answers

    answers = await run_per_item(
        router,
        group_ids,
        deadline,
        route=route,
        send=send,
        reroute=lambda group_id: router.forget_coordinator(CoordinatorType.GROUP, group_id),
    )
    return {
        g: answer
        if isinstance(answer, ConsumerGroupDescription)
        else ConsumerGroupDescription(g, error=answer)
        for g, answer in answers.items()
    }


async def delete_groups(
    router: AdminRouter, group_ids: Sequence[str], deadline: Deadline
) -> dict[str, KafkaError | None]:
    async def route(group_id: str) -> int:
        return await router.coordinator(CoordinatorType.GROUP, group_id)

    async def send(node: int, ids: list[str]) -> dict[str, KafkaError | None]:
        request = DeleteGroupsRequest(groups_names=ids)
        response, _ = await router.send(node, DeleteGroupsRequest.API_KEY, lambda _v: request, deadline)
        return {
            r.group_id: make_error(r.error_code, f"group {r.group_id!r}") if r.error_code else None
            for r in response.results
        }

    return await run_per_item(
        router,
        group_ids,
        deadline,
        route=route,
        send=send,
        reroute=lambda group_id: router.forget_coordinator(CoordinatorType.GROUP, group_id),
    )


def _fetch_request(
    group_id: str, partitions: Sequence[TopicPartition] | None, require_stable: bool, version: int
) -> OffsetFetchRequest:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions or ():
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if version >= OFFSET_FETCH_GROUPS_VERSION:
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        topics = (
            None
            if partitions is None
            else [G.OffsetFetchRequestTopics(name=t, partition_indexes=p) for t, p in by_topic.items()]
        )
        return OffsetFetchRequest(groups=[G(group_id=group_id, topics=topics)], require_stable=require_stable)
    single = (
        None
        if partitions is None
        else [
            OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=p)
            for t, p in by_topic.items()
        ]
    )
    return OffsetFetchRequest(group_id=group_id, topics=single, require_stable=require_stable)


async def list_group_offsets(
    router: AdminRouter,
    group_id: str,
    partitions: Sequence[TopicPartition] | None,
    require_stable: bool,
    deadline: Deadline,
    coordinator: int | None = None,
) -> dict[TopicPartition, OffsetAndMetadata]:
    async def send(
        node: int, _keys: list[int]
    ) -> dict[int, dict[TopicPartition, OffsetAndMetadata] | KafkaError]:
        response, version = await router.send(
            node,
            OffsetFetchRequest.API_KEY,
            lambda v: _fetch_request(group_id, partitions, require_stable, v),
            deadline,
            min_version=None if partitions is not None else 2,
            max_version=OFFSET_MAX_VERSION,
        )
        group = response.groups[0] if version >= OFFSET_FETCH_GROUPS_VERSION else response
        if group.error_code:
            return {0: make_error(group.error_code, f"OffsetFetch for group {group_id!r}")}
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for topic in group.topics:
            for part in topic.partitions:
                if part.error_code:
                    return {
                        0: make_error(part.error_code, f"OffsetFetch {topic.name}-{part.partition_index}")
                    }
                if part.committed_offset >= 0:
                    offsets[TopicPartition(topic.name, part.partition_index)] = OffsetAndMetadata(
                        part.committed_offset, part.metadata or "", part.committed_leader_epoch
                    )
        return {0: offsets}

    answer = (
        await run_per_item(
            router,
            [0],
            deadline,
            route=_group_route(router, group_id, coordinator),
            send=send,
            reroute=lambda _key: router.forget_coordinator(CoordinatorType.GROUP, group_id),
        )
    )[0]
    if isinstance(answer, KafkaError):
        raise answer
    return answer


async def alter_group_offsets(
    router: AdminRouter,
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    deadline: Deadline,
) -> dict[TopicPartition, KafkaError | None]:
    T = OffsetCommitRequest.OffsetCommitRequestTopic

    async def send(node: int, tps: list[TopicPartition]) -> dict[TopicPartition, KafkaError | None]:
        by_topic: dict[str, list[Any]] = {}
        for tp in tps:
            entry = offsets[tp]
            by_topic.setdefault(tp.topic, []).append(
                T.OffsetCommitRequestPartition(
                    partition_index=tp.partition,
                    committed_offset=entry.offset,
                    committed_leader_epoch=entry.leader_epoch,
                    committed_metadata=entry.metadata,
                )
            )
        request = OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[T(name=t, partitions=p) for t, p in by_topic.items()],
        )
        response, _ = await router.send(
            node, OffsetCommitRequest.API_KEY, lambda _v: request, deadline, max_version=OFFSET_MAX_VERSION
        )
        return {
            TopicPartition(t.name, p.partition_index): make_error(
                p.error_code, f"{t.name}-{p.partition_index}"
            )
            if p.error_code
            else None
            for t in response.topics
            for p in t.partitions
        }

    return await run_per_item(
        router,
        offsets,
        deadline,
        route=_group_route(router, group_id),
        send=send,
        reroute=lambda _tp: router.forget_coordinator(CoordinatorType.GROUP, group_id),
    )


async def delete_group_offsets(
    router: AdminRouter, group_id: str, partitions: Sequence[TopicPartition], deadline: Deadline
) -> dict[TopicPartition, KafkaError | None]:
    T = OffsetDeleteRequest.OffsetDeleteRequestTopic

    async def send(node: int, tps: list[TopicPartition]) -> dict[TopicPartition, KafkaError | None]:
        by_topic: dict[str, list[Any]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(
                T.OffsetDeleteRequestPartition(partition_index=tp.partition)
            )
        request = OffsetDeleteRequest(
            group_id=group_id, topics=[T(name=t, partitions=p) for t, p in by_topic.items()]
        )
        response, _ = await router.send(node, OffsetDeleteRequest.API_KEY, lambda _v: request, deadline)
        if response.error_code:
            error = make_error(response.error_code, f"OffsetDelete for group {group_id!r}")
            return dict.fromkeys(tps, error)
        return {
            TopicPartition(t.name, p.partition_index): make_error(
                p.error_code, f"{t.name}-{p.partition_index}"
            )
            if p.error_code
            else None
            for t in response.topics
            for p in t.partitions
        }

    return await run_per_item(
        router,
        partitions,
        deadline,
        route=_group_route(router, group_id),
        send=send,
        reroute=lambda _tp: router.forget_coordinator(CoordinatorType.GROUP, group_id),
        final_codes={ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    )
