"""The KIP-848 records the coordinator writes are Kafka 4.1's layout, and a group written in the
layout before it (a ConsumerGroupPartitionMetadata record, no topics hash in the group epoch
record, no explicit null ClassicMemberMetadata) still loads and moves to the new layout.

Kafka 4.1 keeps a hash of the subscribed topics' metadata in ConsumerGroupMetadataValue (tagged
field 0) instead of the ConsumerGroupPartitionMetadata record, and writes a consumer-protocol
member's ClassicMemberMetadata as an explicit null (tag 0, one byte: presence marker 0).
"""

from __future__ import annotations

import struct

from reference_broker.coordinator.group import consumer_records as rec
from reference_broker.coordinator.group.consumer_group import TopicInfo
from reference_broker.internal_records import ConsumerGroupMetadataValue
from sdk.protocol.codec import decode
from tests.reference_broker.coordinator.group.test_consumer_coordinator import TOPIC, Member, Node, settle

Record = tuple[bytes, bytes | None]


def _kind(key: bytes) -> int:
    return int(struct.unpack_from(">h", key)[0])


def _records(node: Node) -> list[Record]:
    return list(node.store.partitions.get(0, []))


def _epoch_values(records: list[Record]) -> list[ConsumerGroupMetadataValue]:
    return [
        decode(ConsumerGroupMetadataValue, memoryview(v)[2:], 0)
        for k, v in records
        if _kind(k) == rec.EPOCH and v is not None
    ]


def _to_old_layout(records: list[Record], topics: dict[str, TopicInfo]) -> list[Record]:
    """The same group as the coordinator before Kafka 4.1's layout wrote it: each group epoch record
    without the hash and after a subscribed topics record."""
    out: list[Record] = []
    for key, value in records:
        if _kind(key) == rec.EPOCH and value is not None:
            (epoch,) = struct.unpack_from(">i", value, 2)
            group_id = decode(rec.KEY_CLASSES[rec.EPOCH], memoryview(key)[2:], rec.EPOCH).group_id
            out.append(rec.topics_record(group_id, topics))
            out.append((key, struct.pack(">hi", 0, epoch) + b"\x00"))
        else:
            out.append((key, value))
    return out


def test_the_group_epoch_record_carries_the_topics_hash_and_no_topics_record_is_written() -> None:
    node = Node()
    a, b = Member(node, "a"), Member(node, "b")
    a.heartbeat()
    b.heartbeat()
    settle(a, b)
    records = _records(node)
    assert rec.TOPICS not in {_kind(k) for k, _ in records}
    hashes = [v.metadata_hash for v in _epoch_values(records)]
    assert hashes and all(h == rec.metadata_hash(node.topics) != 0 for h in hashes), hashes
    # A consumer-protocol member's ClassicMemberMetadata is an explicit null, as Kafka writes it.
    member_values = [v for k, v in records if _kind(k) == rec.MEMBER and v is not None]
    assert member_values and all(v.endswith(b"\x01\x00\x01\x00") for v in member_values)


def test_partitions_added_while_the_broker_was_down_bump_the_epoch_at_the_next_heartbeat() -> None:
    node = Node(partitions=2)
    a = Member(node, "a")
    a.heartbeat()
    settle(a)
    epoch = node.consumer.groups["g"].group_epoch
    node.topics[TOPIC] = TopicInfo(node.topic_id, TOPIC, 4)
    node.restart()
    assert node.consumer.groups["g"].group_epoch == epoch
    settle(a)
    assert node.consumer.groups["g"].group_epoch == epoch + 1
    assert a.partitions() == {0, 1, 2, 3}


def test_a_group_in_the_layout_before_kafka_41_loads_and_moves_to_the_new_layout() -> None:
    node = Node()
    a, b = Member(node, "a"), Member(node, "b", "inst-b")
    a.heartbeat()
    b.heartbeat()
    settle(a, b)
    group = node.consumer.groups["g"]
    expected = (group.group_epoch, group.assignment_epoch, dict(group.target), dict(group.members))
    # Old member records carried no ClassicMemberMetadata tag at all.
    old = [
        (k, v[:-4] + b"\x00" if _kind(k) == rec.MEMBER and v is not None else v)
        for k, v in _to_old_layout(_records(node), dict(node.topics))
    ]
    node.store.partitions[0] = old
    node.restart()
    group = node.consumer.groups["g"]
    assert (group.group_epoch, group.assignment_epoch, dict(group.target), dict(group.members)) == expected
    settle(a, b)  # unchanged topics: no new epoch
    assert node.consumer.groups["g"].group_epoch == expected[0]
    written = len(node.store.partitions[0])
    node.topics[TOPIC] = TopicInfo(node.topic_id, TOPIC, 6)
    settle(a, b)
    new = node.store.partitions[0][written:]
    kinds = [(_kind(k), v is None) for k, v in new if _kind(k) in (rec.TOPICS, rec.EPOCH)]
    # The old topics record is deleted just before the first epoch record of the new layout.
    assert kinds[:2] == [(rec.TOPICS, True), (rec.EPOCH, False)], kinds
    assert rec.TOPICS not in {_kind(k) for k, v in new[1:] if v is not None}
    assert a.partitions() | b.partitions() == set(range(6))
    node.restart()
    assert node.consumer.groups["g"].group_epoch == expected[0] + 1
    assert not node.consumer.groups["g"].has_partition_metadata_record


def test_a_regular_expression_record_round_trips() -> None:
    resolved = rec.ResolvedRegex(frozenset({"a", "b"}), 7, 1234)
    replay = rec.ConsumerGroupReplay()
    replay.add(*rec.epoch_record("g", 1, 0))
    replay.add(*rec.regex_record("g", "^a.*", resolved))
    groups, _ = replay.groups(0)
    assert groups["g"].resolved_regexes == {"^a.*": resolved}
    replay.add(*rec.regex_tombstone("g", "^a.*"))
    groups, _ = replay.groups(0)
    assert groups["g"].resolved_regexes == {}
