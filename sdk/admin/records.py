"""ListOffsets and DeleteRecords, each sent to the partitions' leaders (grouped per leader),
with the leaders looked up again after NOT_LEADER_OR_FOLLOWER and friends."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sdk.admin.results import DeletedRecords, ListOffsetsResultInfo
from sdk.admin.routing import AdminRouter, Deadline, run_per_item
from sdk.admin.types import IsolationLevel, OffsetSpec
from sdk.client.cluster import TopicPartition
from sdk.errors import KafkaError, make_error
from sdk.protocol.messages import DeleteRecordsRequest, ListOffsetsRequest

__all__ = ["delete_records", "isolation", "list_offsets"]

#: ListOffsets: isolation_level from v2, MAX_TIMESTAMP (-3) from v7.
LIST_OFFSETS_ISOLATION_VERSION = 2
LIST_OFFSETS_MAX_TIMESTAMP_VERSION = 7


def isolation(level: IsolationLevel | str) -> IsolationLevel:
    if isinstance(level, str):
        try:
            return IsolationLevel[level.upper()]
        except KeyError:
            raise ValueError(
                f"isolation_level: {level!r} is not 'read_uncommitted' or 'read_committed'"
            ) from None
    try:
        return IsolationLevel(level)
    except ValueError:
        raise ValueError(f"isolation_level: unknown level {level!r}") from None


def _leader_route(router: AdminRouter, deadline: Deadline) -> Any:
    async def route(tp: TopicPartition) -> int:
        return await router.leader(tp.topic, tp.partition, deadline)

    return route


def _by_topic(tps: list[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for tp in tps:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


async def list_offsets(
    router: AdminRouter,
    specs: Mapping[TopicPartition, OffsetSpec],
    level: IsolationLevel,
    deadline: Deadline,
) -> dict[TopicPartition, ListOffsetsResultInfo]:
    T = ListOffsetsRequest.ListOffsetsTopic

    async def send(
        node: int, tps: list[TopicPartition]
    ) -> dict[TopicPartition, ListOffsetsResultInfo | KafkaError]:
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=int(level),
            topics=[
                T(
                    name=topic,
                    partitions=[
                        T.ListOffsetsPartition(
                            partition_index=p,
                            current_leader_epoch=-1,
                            timestamp=specs[TopicPartition(topic, p)].timestamp,
                        )
                        for p in partitions
                    ],
                )
                for topic, partitions in _by_topic(tps).items()
            ],
            timeout_ms=int(deadline.remaining_ms()),
        )
        needs_max = any(specs[tp].timestamp == OffsetSpec.MAX_TIMESTAMP for tp in tps)
        min_version = (
            LIST_OFFSETS_MAX_TIMESTAMP_VERSION
            if needs_max
            else LIST_OFFSETS_ISOLATION_VERSION
            if level
            else None
        )
        response, _ = await router.send(
            node, ListOffsetsRequest.API_KEY, lambda _v: request, deadline, min_version=min_version
        )
        answers: dict[TopicPartition, ListOffsetsResultInfo | KafkaError] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code:
                    answers[tp] = make_error(p.error_code, f"ListOffsets {tp.topic}-{tp.partition}")
                else:
                    epoch = p.leader_epoch if p.leader_epoch >= 0 else None
                    answers[tp] = ListOffsetsResultInfo(p.offset, p.timestamp, epoch)
        return answers

    answers = await run_per_item(
        router,
        specs,
        deadline,
        route=_leader_route(router, deadline),
        send=send,
        reroute=lambda tp: router.forget_leaders([tp.topic]),
    )
    return {
        tp: answer if isinstance(answer, ListOffsetsResultInfo) else ListOffsetsResultInfo(error=answer)
        for tp, answer in answers.items()
    }


async def delete_records(
    router: AdminRouter, offsets: Mapping[TopicPartition, int], deadline: Deadline
) -> dict[TopicPartition, DeletedRecords]:
    T = DeleteRecordsRequest.DeleteRecordsTopic

    async def send(node: int, tps: list[TopicPartition]) -> dict[TopicPartition, DeletedRecords | KafkaError]:
        request = DeleteRecordsRequest(
            topics=[
                T(
                    name=topic,
                    partitions=[
                        T.DeleteRecordsPartition(partition_index=p, offset=offsets[TopicPartition(topic, p)])
                        for p in partitions
                    ],
                )
                for topic, partitions in _by_topic(tps).items()
            ],
            timeout_ms=int(deadline.remaining_ms()),
        )
        response, _ = await router.send(node, DeleteRecordsRequest.API_KEY, lambda _v: request, deadline)
        answers: dict[TopicPartition, DeletedRecords | KafkaError] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                answers[tp] = (
                    make_error(p.error_code, f"DeleteRecords {tp.topic}-{tp.partition}")
                    if p.error_code
                    else DeletedRecords(p.low_watermark)
                )
        return answers

    answers = await run_per_item(
        router,
        offsets,
        deadline,
        route=_leader_route(router, deadline),
        send=send,
        reroute=lambda tp: router.forget_leaders([tp.topic]),
    )
    return {
        tp: answer if isinstance(answer, DeletedRecords) else DeletedRecords(error=answer)
        for tp, answer in answers.items()
    }
