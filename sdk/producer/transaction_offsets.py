"""What ``send_offsets_to_transaction`` takes, in TxnOffsetCommit's terms: the consumer offsets
(``offsets_by_topic``) and the consumer group's identity (``group_identity``: a group id, or the
consumer's ``group_metadata()`` whose generation and member id let the group coordinator refuse a
zombie's commit, KIP-447).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sdk.consumer.errors import CommitFailedError
from sdk.errors import KafkaError

__all__ = ["GroupIdentity", "group_identity", "group_mismatch_error", "offsets_by_topic"]


class GroupIdentity:
    """The group fields of TxnOffsetCommit (KIP-447): what ``ConsumerGroupMetadata`` carries."""

    __slots__ = ("generation_id", "group_id", "group_instance_id", "member_id")

    def __init__(
        self,
        group_id: str,
        generation_id: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
    ) -> None:
        self.group_id = group_id
        self.generation_id = generation_id
        self.member_id = member_id
        self.group_instance_id = group_instance_id

    def __repr__(self) -> str:
        return (
            f"GroupIdentity({self.group_id!r}, generation={self.generation_id}, "
            f"member={self.member_id!r}, instance={self.group_instance_id!r})"
        )


def group_identity(group: Any) -> GroupIdentity:
    """A group id (no generation checks, as before KIP-447) or a consumer's ``group_metadata()``."""
    if isinstance(group, str):
        if not group:
            raise ValueError("send_offsets_to_transaction needs a non-empty group id")
        return GroupIdentity(group)
    group_id = getattr(group, "group_id", None)
    if not isinstance(group_id, str) or not group_id:
        raise TypeError(
            f"send_offsets_to_transaction takes a group id or a consumer's group_metadata(), not {group!r}"
        )
    return GroupIdentity(
        group_id,
        int(getattr(group, "generation_id", -1)),
        getattr(group, "member_id", "") or "",
        getattr(group, "group_instance_id", None),
    )


def group_mismatch_error(what: str, group: GroupIdentity, refusal: KafkaError) -> CommitFailedError:
    """The group coordinator refused the offsets because ``group`` is not (or no longer) its
    member in that generation: the consumer was dropped from the group, or it rebalanced, and
    another member may own the partitions now. As Java's producer does, a ``CommitFailedError``
    (the transaction is abortable, the producer stays usable); FENCED_INSTANCE_ID keeps its own
    class."""
    return CommitFailedError(
        f"{what}: offsets refused ({refusal.name}): consumer group metadata {group!r} is not the "
        "group's current member and generation (the consumer was dropped from the group or it "
        "rebalanced); abort the transaction and poll again"
    )


def offsets_by_topic(
    offsets: Mapping[Any, Any] | Iterable[Any],
) -> dict[str, list[tuple[int, int, str | None, int]]]:
    """``{TopicPartition or (topic, partition): OffsetAndMetadata or offset}`` (a list of
    confluent-style ``TopicPartition`` objects with ``.offset`` also works) as TxnOffsetCommit's
    ``topic -> [(partition, offset, metadata, leader_epoch)]``. The offset is the next record to
    read, as in every Kafka commit."""
    items: list[tuple[Any, Any]]
    if isinstance(offsets, Mapping):
        items = list(offsets.items())
    else:
        items = [(tp, getattr(tp, "offset", None)) for tp in offsets]
    result: dict[str, list[tuple[int, int, str | None, int]]] = {}
    for key, value in items:
        if isinstance(key, tuple) and len(key) == 2 and not hasattr(key, "topic"):
            topic, partition = key
        else:
            topic, partition = getattr(key, "topic", None), getattr(key, "partition", None)
        if not isinstance(topic, str) or not isinstance(partition, int):
            raise TypeError(f"offsets keys are TopicPartition or (topic, partition), not {key!r}")
        if isinstance(value, int) and not isinstance(value, bool):
            offset, metadata, leader_epoch = value, "", -1
        elif hasattr(value, "offset"):
            offset = value.offset
            metadata = getattr(value, "metadata", "") or ""
            leader_epoch = getattr(value, "leader_epoch", -1)
            if not isinstance(leader_epoch, int) or leader_epoch is None:
                leader_epoch = -1
        else:
            raise TypeError(
                f"offset for {topic}-{partition} must be an int or OffsetAndMetadata, not {value!r}"
            )
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset for {topic}-{partition} must be >= 0, not {offset!r}")
        result.setdefault(topic, []).append((partition, offset, metadata, leader_epoch))
    return result
