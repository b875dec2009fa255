"""Committed offsets of a group for a consumer that is not a group member (assign mode).

Used by ``Consumer`` only while ``sdk.consumer.group_coordinator`` is not available; the group
coordinator offers the same two calls (``commit_offsets``, ``fetch_committed_offsets``) with the
member's generation. Commits here carry generation -1 and an empty member id, which Kafka accepts
from "simple" consumers of a group without members.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from sdk.client.client import KafkaClient
from sdk.client.cluster import TopicPartition
from sdk.client.connection import pick_version
from sdk.consumer.errors import CommitFailedError
from sdk.consumer.records import OffsetAndMetadata
from sdk.errors import ErrorCode, KafkaError, KafkaTimeoutError, make_error
from sdk.protocol.messages import (
    FindCoordinatorRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)

__all__ = ["GroupOffsetStore"]

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 10, 8, 9
#: OffsetCommit/OffsetFetch v10 name topics by id; these versions still name them.
_MAX_BY_NAME = {OFFSET_COMMIT: 9, OFFSET_FETCH: 9}
_COORDINATOR_ERRORS = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
)
_REBALANCED = frozenset(
    {ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS}
)


class GroupOffsetStore:
    """OffsetCommit/OffsetFetch against the group's coordinator, found with FindCoordinator."""

    def __init__(self, client: KafkaClient, group_id: str, *, retry_backoff_ms: float = 100,
                 timeout_ms: float = 30000) -> None:
        self._client = client
        self._group_id = group_id
        self._backoff_s = retry_backoff_ms / 1000
        self._timeout_s = timeout_ms / 1000
        self._coordinator: int | None = None

    async def _coordinator_node(self) -> int:
        if self._coordinator is not None:
            return self._coordinator
        client = self._client
        node = await client.wait_for_node()
        conn = await client.get_connection(node)
        version = conn.version_for(FIND_COORDINATOR)
        if version >= 4:
            request = FindCoordinatorRequest(key_type=0, coordinator_keys=[self._group_id])
        else:
            request = FindCoordinatorRequest(key=self._group_id, key_type=0)
        response = await conn.request(request, version)
        if version >= 4:
            entry = response.coordinators[0]
            code, node_id, host, port = entry.error_code, entry.node_id, entry.host, entry.port
        else:
            code, node_id, host, port = response.error_code, response.node_id, response.host, response.port
        if code:
            raise make_error(code, f"FindCoordinator {self._group_id!r}")
        if node_id not in client.cluster.brokers:
            await client.refresh_metadata()
        del host, port
        self._coordinator = node_id
        return node_id

    async def _request(self, api_key: int, build: Any) -> tuple[Any, int]:
        """Send ``build(version)`` to the coordinator, re-finding it on coordinator errors."""
        deadline = time.monotonic() + self._timeout_s
        last: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                node = await self._coordinator_node()
                conn = await self._client.get_connection(node)
                version = pick_version(
                    api_key, conn.broker_versions.get(api_key), max_version=_MAX_BY_NAME[api_key]
                )
                response = await conn.request(build(version), version)
            except KafkaError as exc:
                if not exc.retriable and exc.code not in _COORDINATOR_ERRORS:
                    raise
                last = exc
                self._coordinator = None
                await asyncio.sleep(self._backoff_s)
                continue
            code = _first_error(response, version)
            if code in _COORDINATOR_ERRORS:
                last = make_error(code)
                self._coordinator = None
                await asyncio.sleep(self._backoff_s)
                continue
            return response, version
        raise KafkaTimeoutError(f"no answer from the coordinator of group {self._group_id!r}: {last}")

    async def commit_offsets(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        by_topic: dict[str, list[Any]] = {}
        for tp, entry in offsets.items():
            by_topic.setdefault(tp.topic, []).append(
                OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=tp.partition,
                    committed_offset=entry.offset,
                    committed_leader_epoch=entry.leader_epoch,
                    committed_metadata=entry.metadata,
                )
            )

        def build(version: int) -> OffsetCommitRequest:
            return OffsetCommitRequest(
                group_id=self._group_id,
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                topics=[
                    OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=p)
                    for t, p in by_topic.items()
                ],
            )

        response, _ = await self._request(OFFSET_COMMIT, build)
        for t in response.topics:
            for p in t.partitions:
                if p.error_code in _REBALANCED:
                    raise CommitFailedError(f"commit rejected: {make_error(p.error_code)}")
                if p.error_code:
                    raise make_error(p.error_code, f"OffsetCommit {t.name}-{p.partition_index}")

    async def fetch_committed_offsets(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)

        def build(version: int) -> OffsetFetchRequest:
            if version >= 8:
                return OffsetFetchRequest(
                    groups=[
                        OffsetFetchRequest.OffsetFetchRequestGroup(
                            group_id=self._group_id,
                            topics=[
                                OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=p)
                                for t, p in by_topic.items()
                            ],
                        )
                    ],
                    require_stable=True,
                )
            return OffsetFetchRequest(
                group_id=self._group_id,
                topics=[
                    OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=p)
                    for t, p in by_topic.items()
                ],
                require_stable=True,
            )

        response, version = await self._request(OFFSET_FETCH, build)
        topics = response.groups[0].topics if version >= 8 else response.topics
        result: dict[TopicPartition, OffsetAndMetadata | None] = {tp: None for tp in partitions}
        for t in topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code:
                    raise make_error(p.error_code, f"OffsetFetch {t.name}-{p.partition_index}")
                if tp in result and p.committed_offset >= 0:
                    result[tp] = OffsetAndMetadata(
                        p.committed_offset, p.metadata or "", p.committed_leader_epoch
                    )
        return result


def _first_error(response: Any, version: int) -> int:
    """The group's error code, else the first partition's coordinator error (OffsetCommit reports
    NOT_COORDINATOR per partition), else 0."""
    if hasattr(response, "groups") and version >= 8 and response.groups:
        code = int(response.groups[0].error_code)
        topics = response.groups[0].topics
    else:
        code = int(getattr(response, "error_code", 0) or 0)
        topics = response.topics
    if code:
        return code
    for t in topics:
        for p in t.partitions:
            if p.error_code in _COORDINATOR_ERRORS:
                return int(p.error_code)
    return 0
