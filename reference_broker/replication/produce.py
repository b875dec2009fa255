"""The cluster-mode steps of a Produce around the leader's append (Kafka's ``ReplicaManager
.appendRecords`` + ``DelayedProduce``).

Before the append: the partition must be led here (NOT_LEADER_OR_FOLLOWER otherwise), and with
acks=all its ISR must hold ``min.insync.replicas`` members (the topic's setting, else the
broker's): NOT_ENOUGH_REPLICAS, nothing written. After it, acks=all waits until the high
watermark covers the append (every ISR member has it); if the ISR shrank below
``min.insync.replicas`` meanwhile the answer is NOT_ENOUGH_REPLICAS_AFTER_APPEND (the records are
written and may be read: a retry duplicates them unless the producer is idempotent), and
REQUEST_TIMED_OUT after the request's ``timeout_ms``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sdk.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from reference_broker.replication.partition import Partition
    from reference_broker.replication.replica_manager import ReplicaManager

ACKS_ALL = -1


@dataclass
class PendingAck:
    """An appended partition of an acks=all produce, waiting for its high watermark."""

    response: Any  # ProduceResponse.PartitionProduceResponse, answered in place
    partition: Partition
    required_offset: int
    min_insync_replicas: int


def min_insync_replicas(manager: ReplicaManager, partition: Partition) -> int:
    raw = partition.log.config.extra.get("min.insync.replicas")
    return int(raw) if raw is not None else manager.config.min_insync_replicas


def check_leader(manager: ReplicaManager, topic: str, index: int, acks: int
                 ) -> tuple[Partition | None, int, str]:
    """The partition to append to, or the error code (and message) refusing the append."""
    partition = manager.partition(topic, index)
    if partition is None or not partition.is_leader:
        return None, ErrorCode.NOT_LEADER_OR_FOLLOWER, f"This broker does not lead {topic}-{index}"
    if acks == ACKS_ALL:
        try:
            partition.check_enough_replicas(min_insync_replicas(manager, partition))
        except KafkaError as exc:
            return None, exc.code, exc.message or exc.name
    return partition, ErrorCode.NONE, ""


async def wait_for_acks(pending: list[PendingAck], timeout_ms: int) -> None:
    """Wait for every pending append's high watermark; errors go into its response."""
    timeout_s = max(0, timeout_ms) / 1000

    async def one(ack: PendingAck) -> None:
        try:
            await ack.partition.wait_for_high_watermark(
                ack.required_offset, ack.min_insync_replicas, timeout_s)
        except KafkaError as exc:
            ack.response.error_code = exc.code
            ack.response.error_message = exc.message or exc.name

    await asyncio.gather(*(one(ack) for ack in pending))
