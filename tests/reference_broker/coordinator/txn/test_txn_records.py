"""``__transaction_state`` records: the layout of Kafka's TransactionLogKey/Value, built by hand
from the JSON definitions' field order, reads back through the generated classes; our v1 records
are the bytes the broker has always written (captured from the hand-declared tables the generated
classes replaced) and round-trip; the partition of an id is Kafka's ``abs(hashCode) % partitions``."""

from __future__ import annotations

import struct

from reference_broker.coordinator.txn import records
from reference_broker.coordinator.txn.state import TransactionMetadata, TxnState


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def test_kafka_v0_value_layout_is_read() -> None:
    # version 0: ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs int32,
    # TransactionStatus int8, TransactionPartitions [Topic string, PartitionIds [int32]],
    # TransactionLastUpdateTimestampMs int64, TransactionStartTimestampMs int64.
    partitions = struct.pack(">i", 1) + _string("orders") + struct.pack(">iii", 2, 0, 3)
    body = struct.pack(">qhib", 42, 7, 60_000, 1) + partitions + struct.pack(">qq", 1_000, 900)
    value = records.parse_value(struct.pack(">h", 0) + body)
    assert (value.producer_id, value.producer_epoch, value.timeout_ms, value.state) == (
        42,
        7,
        60_000,
        TxnState.ONGOING,
    )
    assert value.partitions == {("orders", 0), ("orders", 3)}
    assert (value.last_update_ms, value.start_ms, value.previous_producer_id) == (1_000, 900, -1)


def test_key_layout_and_round_trip_of_our_v1_values() -> None:
    assert records.key("tx-1") == struct.pack(">h", 0) + _string("tx-1")
    assert records.parse_key(records.key("tx-1")) == "tx-1"
    meta = TransactionMetadata("tx-1", 5, 3, 30_000, previous_producer_id=4, start_ms=10, last_update_ms=20)
    encoded = records.value(meta, TxnState.PREPARE_COMMIT, {("a", 1), ("a", 0), ("b", 2)})
    assert encoded[:2] == struct.pack(">h", 1)
    loaded = records.parse_value(encoded)
    assert loaded.state is TxnState.PREPARE_COMMIT and loaded.partitions == {("a", 0), ("a", 1), ("b", 2)}
    assert (loaded.producer_id, loaded.previous_producer_id, loaded.producer_epoch) == (5, 4, 3)


def test_record_bytes_are_unchanged() -> None:
    assert records.key("tx-1").hex() == "0000000474782d31"
    # Every tagged field away from its default: PreviousProducerId (0), NextProducerId (1),
    # ClientTransactionVersion (2), NextProducerEpoch (3), written in tag order.
    tagged = TransactionMetadata(
        "tx-1",
        5,
        3,
        30_000,
        previous_producer_id=4,
        start_ms=10,
        last_update_ms=20,
        client_txn_version=2,
        next_producer_id=6,
        next_producer_epoch=0,
    )
    encoded = records.value(tagged, TxnState.PREPARE_COMMIT, {("a", 1), ("a", 0), ("b", 2)})
    assert encoded.hex() == (
        "00010000000000000005000300007530020302610300000000000000010002620200000002000000000000000014"
        "000000000000000a0400080000000000000004010800000000000000060202000203020000"
    )
    loaded = records.parse_value(encoded)
    assert (loaded.client_txn_version, loaded.next_producer_id, loaded.next_producer_epoch) == (2, 6, 0)
    # No tagged field away from its default: an empty tag section.
    plain = records.value(TransactionMetadata("tx-2", 9, 0, 60_000), TxnState.EMPTY, set())
    assert plain.hex() == "0001000000000000000900000000ea600001ffffffffffffffffffffffffffffffff00"


def test_partition_for_matches_java_hashcode() -> None:
    # "hello".hashCode() == 99162322 in Java.
    assert records.partition_for("hello", 50) == 99162322 % 50
    assert all(0 <= records.partition_for(f"id-{i}", 7) < 7 for i in range(100))
