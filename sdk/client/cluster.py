"""The client's picture of the cluster: brokers, topics, partitions and their leaders.

``ClusterMetadata`` is plain data updated from Metadata responses; it does no I/O (``KafkaClient``
decides when to refresh). The producer consults it once per record, so the per-topic partition
lists are precomputed tuples and lookups are single dict hits.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, NamedTuple

from sdk.errors import ErrorCode, KafkaError, make_error

__all__ = [
    "STALE_METADATA_ERRORS",
    "BrokerMetadata",
    "ClusterMetadata",
    "PartitionMetadata",
    "TopicMetadata",
    "TopicPartition",
]

#: Topic and partition errors meaning "not ready yet or stale: ask again" (the codes of Kafka's
#: ``InvalidMetadataException`` family). A topic Apache Kafka is still creating is first answered
#: with LEADER_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION.
STALE_METADATA_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.LISTENER_NOT_FOUND,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.ELECTION_NOT_NEEDED,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
    }
)


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class BrokerMetadata(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None = None


class PartitionMetadata(NamedTuple):
    topic: str
    partition: int
    leader: int  # -1 while there is no leader, or none the response listed among its brokers
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error: KafkaError | None


class TopicMetadata:
    """One topic as last reported; ``error`` is set when the broker could not describe it."""

    __slots__ = ("available", "error", "is_internal", "name", "partition_ids", "partitions", "topic_id")

    def __init__(
        self,
        name: str,
        partitions: dict[int, PartitionMetadata],
        *,
        topic_id: uuid.UUID | None = None,
        is_internal: bool = False,
        error: KafkaError | None = None,
    ):
        self.name = name
        self.partitions = partitions
        self.topic_id = topic_id
        self.is_internal = is_internal
        self.error = error
        self.partition_ids: tuple[int, ...] = tuple(sorted(partitions))
        #: Partitions that have a leader right now (what partitioners may choose from).
        self.available: tuple[int, ...] = tuple(p for p in self.partition_ids if partitions[p].leader >= 0)

    def __repr__(self) -> str:
        return f"TopicMetadata({self.name!r}, partitions={len(self.partitions)}, error={self.error!r})"


class ClusterMetadata:
    """Brokers and topic layouts from the latest Metadata responses."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerMetadata] = {}
        self.topics: dict[str, TopicMetadata] = {}
        #: Topics the last response reported an error for, with that error.
        self.topic_errors: dict[str, KafkaError] = {}
        #: Topics of the last response that are not ready yet, so that a refresh is due soon:
        #: a retriable topic error (``STALE_METADATA_ERRORS``), or a partition with such an
        #: error, without a leader, or led by a broker the response does not list.
        self.incomplete_topics: frozenset[str] = frozenset()
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        #: Bumped on every update, so callers can cache derived views cheaply.
        self.version = 0
        self.last_update_ms: float = 0.0
        self._by_leader: dict[int, list[TopicPartition]] | None = None

    def update(self, response: Any, requested_topics: set[str] | None = None) -> None:
        """Apply a MetadataResponse.

        Topics the request named replace their entries; other cached topics are kept when the
        request listed topics (a partial refresh), dropped when it asked for all topics. A
        partition whose leader is not among the response's brokers is recorded leaderless (-1):
        no connection could be made to it. ``incomplete_topics`` names what should be asked again.
        """
        brokers = {b.node_id: BrokerMetadata(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        self.brokers = brokers
        incomplete: set[str] = set()
        self.cluster_id = response.cluster_id
        self.controller_id = response.controller_id
        topics = {} if requested_topics is None else dict(self.topics)
        errors = {} if requested_topics is None else dict(self.topic_errors)
        for t in response.topics:
            name = t.name
            if name is None:
                continue
            if t.error_code:
                error = make_error(t.error_code, f"topic {name!r}")
                errors[name] = error
                if t.error_code in STALE_METADATA_ERRORS:
                    incomplete.add(name)
                # LEADER_NOT_AVAILABLE still lists partitions of a topic being created.
                if not t.partitions:
                    topics.pop(name, None)
                    continue
            else:
                errors.pop(name, None)
            partitions = {}
            for p in t.partitions:
                leader = p.leader_id if p.leader_id in brokers else -1
                if leader < 0 or p.error_code in STALE_METADATA_ERRORS:
                    incomplete.add(name)
                partitions[p.partition_index] = PartitionMetadata(
                    name,
                    p.partition_index,
                    leader,
                    p.leader_epoch,
                    tuple(p.replica_nodes),
                    tuple(p.isr_nodes),
                    tuple(p.offline_replicas or ()),
                    make_error(p.error_code) if p.error_code else None,
                )
            topic_id = t.topic_id if t.topic_id is not None and t.topic_id.int else None
            topics[name] = TopicMetadata(
                name,
                partitions,
                topic_id=topic_id,
                is_internal=t.is_internal,
                error=errors.get(name),
            )
        self.topics = topics
        self.topic_errors = errors
        self.incomplete_topics = frozenset(incomplete)
        self._by_leader = None
        self.version += 1
        self.last_update_ms = time.monotonic() * 1000

    def broker(self, node_id: int) -> BrokerMetadata | None:
        return self.brokers.get(node_id)

    def topic(self, topic: str) -> TopicMetadata | None:
        return self.topics.get(topic)

    def partitions_for(self, topic: str) -> tuple[int, ...] | None:
        """All partition ids of ``topic``, or None when the topic is not (yet) known."""
        t = self.topics.get(topic)
        return None if t is None else t.partition_ids

    def available_partitions_for(self, topic: str) -> tuple[int, ...]:
        t = self.topics.get(topic)
        return () if t is None else t.available

    def leader_for(self, topic: str, partition: int) -> int:
        """Leader node id, or -1 when unknown or leaderless."""
        t = self.topics.get(topic)
        if t is None:
            return -1
        p = t.partitions.get(partition)
        return -1 if p is None else p.leader

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(partition)

    def partitions_for_broker(self, node_id: int) -> list[TopicPartition]:
        """Partitions ``node_id`` leads (what a Produce request to it may carry)."""
        if self._by_leader is None:
            by_leader: dict[int, list[TopicPartition]] = {}
            for t in self.topics.values():
                for p in t.partitions.values():
                    if p.leader >= 0:
                        by_leader.setdefault(p.leader, []).append(TopicPartition(t.name, p.partition))
            self._by_leader = by_leader
        return self._by_leader.get(node_id, [])

    def topic_error(self, topic: str) -> KafkaError | None:
        return self.topic_errors.get(topic)

    def __repr__(self) -> str:
        return (
            f"ClusterMetadata(cluster_id={self.cluster_id!r}, brokers={sorted(self.brokers)}, "
            f"topics={sorted(self.topics)})"
        )
