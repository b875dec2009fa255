"""Apache Kafka 4.1 as the oracle of the internal record formats.

Two classic consumer groups (a static member that stays, a dynamic one that leaves) commit offsets,
three KIP-848 consumer groups run on the node (a static member, a regular-expression
subscription, and a classic member joined by a consumer-protocol one: an online upgrade that keeps
a classic member inside a consumer group) and a transactional producer commits a transaction (with
offsets); then every record Kafka wrote to ``__consumer_offsets`` and ``__transaction_state`` is
read raw and must decode with
the generated classes of ``reference_broker.internal_records`` whole (no byte left over, no tagged
field the definitions lack) and encode back to Kafka's own bytes, and the broker's readers
(``records.parse_*``) must see the commits, the groups and the transaction. The KRaft metadata log
the node keeps on disk is read the same way, every record with the generated metadata classes.
"""

from __future__ import annotations

import struct
import time
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from reference_broker.coordinator.group import records as group_records
from reference_broker.coordinator.txn import records as txn_records
from reference_broker.coordinator.txn.state import TxnState
from reference_broker.internal_records import (
    METADATA_RECORD_TYPES,
    RECORD_CLASSES,
    TransactionLogKey,
    TransactionLogValue,
)
from sdk.protocol.codec import decode_at, encode
from sdk.protocol.messages import Message
from sdk.protocol.primitives import read_uvarint
from sdk.records import iter_batches
from tests.oracles.kafka_tools import wait_until

#: ``tests.apache_kafka`` gives the internal topics this many partitions.
INTERNAL_PARTITIONS = 5
TIMEOUT_S = 60.0
#: Kafka's metadata record frame: unsigned varints frame version (1), record type, record version.
METADATA_FRAME_VERSION = 1
#: Metadata record types Kafka 4.1 writes that the definitions in ``../shared`` (an older snapshot)
#: lack: ClearElrRecord (KIP-966), which a newer copy of the definitions brings.
UNDEFINED_METADATA_RECORD_TYPES = {28}

Record = tuple[bytes, bytes | None]


def _group_key_classes() -> dict[int, type[Message]]:
    """The ``__consumer_offsets`` key class of each key version (every group record's key)."""
    out: dict[int, type[Message]] = {}
    for name, cls in RECORD_CLASSES.items():
        if cls.KIND != "data" or not name.endswith("Key") or cls is TransactionLogKey:
            continue
        lo, hi = cls.VALID_VERSIONS
        for version in range(lo, hi + 1):
            assert version not in out, f"key version {version}: {out[version].NAME} and {name}"
            out[version] = cls
    return out


def _unknown_tags(msg: Message) -> list[str]:
    """The structs of ``msg`` (itself included) that carried tagged fields the definition lacks."""
    found = [msg.NAME] if msg.unknown_tags else []
    for _, value in msg:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, Message):
                found += _unknown_tags(item)
    return found


def _decode_whole(cls: type[Message], data: bytes) -> Message:
    """``data`` (int16 version + body) decoded as ``cls``, checked against Kafka's bytes."""
    (version,) = struct.unpack_from(">h", data)
    return _decode_body(cls, memoryview(data)[2:], version)


def _decode_body(cls: type[Message], body: memoryview, version: int) -> Message:
    """``body`` decoded as ``cls`` at ``version``: whole, every tagged field known, and encoding
    back to the same bytes."""
    msg, end = decode_at(cls, body, 0, version)
    assert end == len(body), f"{cls.NAME} v{version}: {len(body) - end} bytes left over"
    assert not _unknown_tags(msg), f"{cls.NAME} v{version}: unknown tagged fields in {_unknown_tags(msg)}"
    assert encode(msg, version) == bytes(body), f"{cls.NAME} v{version} does not encode back to Kafka's bytes"
    return msg


def _read_topic(bootstrap: str, topic: str) -> list[Record]:
    """Every (key, value) of ``topic`` up to its end, read with a plain assignment (no group)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"raw-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(INTERNAL_PARTITIONS)
            ]
        )
        at_end: set[int] = set()
        out: list[Record] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(at_end) < INTERNAL_PARTITIONS:
            assert time.monotonic() < deadline, f"{topic}: only partitions {sorted(at_end)} read to their end"
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error, partition = msg.error(), msg.partition()
            if error is not None:
                assert error.code() == confluent_kafka.KafkaError._PARTITION_EOF, error
                assert partition is not None
                at_end.add(partition)
                continue
            key = msg.key()
            assert key is not None, f"{topic}: a record without a key"
            out.append((key, msg.value()))
        return out
    finally:
        consumer.close()


def _consume_and_commit(bootstrap: str, topic: str, group: str, count: int, *, static: bool) -> None:
    """A classic-protocol group member reads ``count`` records and commits, then closes (a dynamic
    member leaves the group; a static one stays in it until its session times out)."""
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if static:
        config["group.instance.id"] = f"{group}-static"
    consumer = confluent_kafka.Consumer(config)
    try:
        consumer.subscribe([topic])
        seen = 0

        def read_some() -> bool:
            nonlocal seen
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
            return seen >= count

        wait_until(read_some, TIMEOUT_S, f"the group to read {count} records", poll=0)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _poll_until(consumers: list[Any], done: Any, what: str) -> None:
    """Poll every consumer in turn (each must keep polling to stay in its group) until ``done()``."""

    def step() -> bool:
        for consumer in consumers:
            consumer.poll(0.2)
        return bool(done())

    wait_until(step, TIMEOUT_S, what, poll=0)


def _consumer(bootstrap: str, group: str, protocol: str, **extra: str) -> Any:
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


def _run_consumer_protocol_groups(bootstrap: str, topic: str, names: dict[str, str]) -> None:
    """The KIP-848 groups: a static member and a regex subscriber that read and commit, and a
    classic member that a consumer-protocol member joins (Kafka upgrades the group online and
    keeps the classic member in it with its ClassicMemberMetadata)."""
    static = _consumer(bootstrap, names["static_group"], "consumer",
                       **{"group.instance.id": f"{names['static_group']}-instance"})
    regex = _consumer(bootstrap, names["regex_group"], "consumer")
    classic = _consumer(bootstrap, names["mixed_group"], "classic")
    modern = _consumer(bootstrap, names["mixed_group"], "consumer")
    everyone = [static, regex, classic, modern]
    try:
        static.subscribe([topic])
        regex.subscribe([f"^{topic}.*"])
        classic.subscribe([topic])
        _poll_until([static, regex, classic], lambda: all(c.assignment() for c in (static, regex, classic)),
                    "the static, regex and classic members to be assigned")
        static.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 1)], asynchronous=False)
        regex.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 1)], asynchronous=False)
        modern.subscribe([topic])
        admin = AdminClient({"bootstrap.servers": bootstrap})

        def upgraded() -> bool:
            group = names["mixed_group"]
            described = admin.describe_consumer_groups([group])[group].result(10)
            is_consumer_group = described.type == confluent_kafka.ConsumerGroupType.CONSUMER
            return is_consumer_group and len(described.members) == 2

        _poll_until(everyone, upgraded, "the mixed group to become a consumer group with both members")
    finally:
        for consumer in everyone:
            consumer.close()


def _commit_transaction(bootstrap: str, topic: str, transactional_id: str, group: str) -> None:
    """One transaction: a record in ``topic`` and an offset of ``group``, committed."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id}
    )
    offsets_holder = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        producer.produce(topic, key=b"k", value=b"in a transaction", partition=0)
        producer.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition(topic, 0, 2)], offsets_holder.consumer_group_metadata(), TIMEOUT_S
        )
        producer.commit_transaction(TIMEOUT_S)
    finally:
        offsets_holder.close()


@pytest.fixture(scope="module")
def kafka_written(apache_kafka: Any) -> dict[str, Any]:
    """The names used and the raw records of both internal topics after the group and the transaction."""
    bootstrap = apache_kafka.bootstrap
    suffix = uuid.uuid4().hex[:8]
    topic, group, left_group, txn_group, transactional_id = (
        f"records-{suffix}", f"group-{suffix}", f"left-group-{suffix}", f"txn-group-{suffix}", f"txn-{suffix}"
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(TIMEOUT_S)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        producer.produce(topic, key=b"k", value=f"v{i}".encode(), partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    _consume_and_commit(bootstrap, topic, group, 3, static=True)
    _consume_and_commit(bootstrap, topic, left_group, 2, static=False)
    _commit_transaction(bootstrap, topic, transactional_id, txn_group)
    kip848 = {
        name: f"{name.replace('_', '-')}-{suffix}" for name in ("static_group", "regex_group", "mixed_group")
    }
    _run_consumer_protocol_groups(bootstrap, topic, kip848)

    def transaction_records() -> list[Record]:
        return [r for r in _read_topic(bootstrap, "__transaction_state")
                if txn_records.parse_key(r[0]) == transactional_id]

    # The coordinator writes CompleteCommit once the markers are written, after EndTxn answered.
    def completed() -> bool:
        return any(v is not None and txn_records.parse_value(v).state is TxnState.COMPLETE_COMMIT
                   for _, v in transaction_records())

    wait_until(completed, TIMEOUT_S, "Kafka to write the CompleteCommit record", poll=0.2)
    return {
        **kip848,
        "topic": topic,
        "group": group,
        "left_group": left_group,
        "txn_group": txn_group,
        "transactional_id": transactional_id,
        "offsets": _read_topic(bootstrap, "__consumer_offsets"),
        "transactions": _read_topic(bootstrap, "__transaction_state"),
    }


def test_every_consumer_offsets_record_decodes_whole(kafka_written: dict[str, Any]) -> None:
    key_classes = _group_key_classes()
    kinds: set[str] = set()
    classic_members = 0
    # Every record of the node (other tests' groups too), not only this scenario's.
    for key, value in kafka_written["offsets"]:
        (key_version,) = struct.unpack_from(">h", key)
        assert key_version in key_classes, f"__consumer_offsets key version {key_version} is not defined"
        key_class = key_classes[key_version]
        _decode_whole(key_class, key)
        if value is not None:
            decoded = _decode_whole(RECORD_CLASSES[key_class.NAME.removesuffix("Key") + "Value"], value)
            if getattr(decoded, "classic_member_metadata", None) is not None:
                classic_members += 1
        kinds.add(key_class.NAME)
    assert {
        "OffsetCommitKey",
        "GroupMetadataKey",
        "ConsumerGroupMetadataKey",
        "ConsumerGroupMemberMetadataKey",
        "ConsumerGroupTargetAssignmentMetadataKey",
        "ConsumerGroupTargetAssignmentMemberKey",
        "ConsumerGroupCurrentMemberAssignmentKey",
        "ConsumerGroupRegularExpressionKey",
    } <= kinds, kinds
    assert classic_members, "no classic member of a consumer group among Kafka's records"


def test_the_broker_writes_offset_commits_as_kafka_does(kafka_written: dict[str, Any]) -> None:
    """The same commit gives the same value bytes (Kafka 4.1 writes OffsetCommitValue v4)."""
    ours = {kafka_written[k] for k in ("group", "left_group", "static_group", "regex_group")}
    compared = 0
    for key, value in kafka_written["offsets"]:
        parsed = group_records.parse_key(key)
        if not isinstance(parsed, group_records.OffsetKey) or parsed.group not in ours or value is None:
            continue
        kafka = group_records.parse_offset_value(value)
        mine = group_records.offset_value(
            kafka.offset, kafka.leader_epoch, kafka.metadata, kafka.commit_timestamp, None
        )
        assert mine.hex() == value.hex()
        compared += 1
    assert compared >= len(ours)


def test_every_transaction_state_record_decodes_whole(kafka_written: dict[str, Any]) -> None:
    assert kafka_written["transactions"]
    for key, value in kafka_written["transactions"]:
        _decode_whole(TransactionLogKey, key)
        if value is not None:
            _decode_whole(TransactionLogValue, value)


def test_the_broker_reads_kafkas_offsets_and_groups(kafka_written: dict[str, Any]) -> None:
    topic, group, txn_group = kafka_written["topic"], kafka_written["group"], kafka_written["txn_group"]
    left_group = kafka_written["left_group"]
    offsets: dict[tuple[str, str, int], int] = {}
    groups: dict[str, group_records.GroupMetadataValue | None] = {}
    for key, value in kafka_written["offsets"]:
        parsed = group_records.parse_key(key)
        if isinstance(parsed, group_records.OffsetKey) and value is not None:
            offset = group_records.parse_offset_value(value).offset
            offsets[(parsed.group, parsed.topic, parsed.partition)] = offset
        elif isinstance(parsed, group_records.GroupKey):
            groups[parsed.group] = None if value is None else group_records.parse_group_value(value)
    assert offsets[(group, topic, 0)] == 3
    assert offsets[(left_group, topic, 0)] == 2
    assert offsets[(txn_group, topic, 0)] == 2
    # The static member stays in its group after closing.
    stable = groups[group]
    assert stable is not None and (stable.protocol_type, stable.protocol) == ("consumer", "range")
    assert [m.group_instance_id for m in stable.members] == [f"{group}-static"]
    assert stable.leader == stable.members[0].member_id and stable.members[0].assignment
    # The dynamic member left: the group's last record has a new generation and no member.
    left = groups[left_group]
    assert left is not None and left.members == [] and left.protocol is None and left.generation == 2


def test_the_broker_reads_kafkas_transaction(kafka_written: dict[str, Any]) -> None:
    transactional_id, topic, txn_group = (
        kafka_written["transactional_id"], kafka_written["topic"], kafka_written["txn_group"]
    )
    values = [txn_records.parse_value(v) for k, v in kafka_written["transactions"]
              if v is not None and txn_records.parse_key(k) == transactional_id]
    states = [v.state for v in values]
    assert states[0] is TxnState.EMPTY and states[-1] is TxnState.COMPLETE_COMMIT
    assert TxnState.ONGOING in states and TxnState.PREPARE_COMMIT in states
    prepared = next(v for v in values if v.state is TxnState.PREPARE_COMMIT)
    offsets_partition = group_records.partition_for(txn_group, INTERNAL_PARTITIONS)
    assert prepared.partitions == {(topic, 0), ("__consumer_offsets", offsets_partition)}
    assert len({v.producer_id for v in values}) == 1
    assert values[-1].partitions == set()


def _metadata_records(log_dir: Path) -> list[Message]:
    """Every record of the node's KRaft metadata log segments, decoded (control batches and the
    types of ``UNDEFINED_METADATA_RECORD_TYPES`` skipped)."""
    out: list[Message] = []
    for segment in sorted((log_dir / "__cluster_metadata-0").glob("*.log")):
        for batch in iter_batches(segment.read_bytes()):
            if batch.is_control:
                continue
            for record in batch:
                assert record.value is not None, f"a metadata record without a value at {record.offset}"
                value = memoryview(record.value)
                frame, pos = read_uvarint(value, 0, len(value))
                record_type, pos = read_uvarint(value, pos, len(value))
                version, pos = read_uvarint(value, pos, len(value))
                assert frame == METADATA_FRAME_VERSION, f"frame version {frame} at {record.offset}"
                if record_type in UNDEFINED_METADATA_RECORD_TYPES:
                    continue
                assert record_type in METADATA_RECORD_TYPES, f"metadata record type {record_type}"
                out.append(_decode_body(METADATA_RECORD_TYPES[record_type], value[pos:], version))
    return out


def test_every_metadata_log_record_decodes_whole(apache_kafka: Any, kafka_written: dict[str, Any]) -> None:
    """The topic, its partition, the broker's registration, the features and the producer id block
    the transaction needed are all in the metadata log, each decoding whole."""
    topic = kafka_written["topic"]

    def records_of_topic() -> list[Message]:
        return [r for r in _metadata_records(apache_kafka.data_dir / "logs")
                if r.NAME == "TopicRecord" and getattr(r, "name", None) == topic]

    wait_until(lambda: bool(records_of_topic()), TIMEOUT_S, f"the TopicRecord of {topic} on disk", poll=0.2)
    decoded = _metadata_records(apache_kafka.data_dir / "logs")
    kinds = {r.NAME for r in decoded}
    assert {"TopicRecord", "PartitionRecord", "RegisterBrokerRecord", "FeatureLevelRecord",
            "ProducerIdsRecord"} <= kinds, kinds
    (topic_record,) = records_of_topic()
    partitions = [r for r in decoded if r.NAME == "PartitionRecord"
                  and getattr(r, "topic_id", None) == getattr(topic_record, "topic_id", None)]
    assert [getattr(r, "partition_id", None) for r in partitions] == [0]
