"""The ``__transaction_state`` record formats, as Kafka's transaction coordinator writes them.

The record classes (TransactionLogKey v0, TransactionLogValue v0-1, v1 flexible with four tagged
fields: PreviousProducerId, NextProducerId, ClientTransactionVersion and KIP-939's
NextProducerEpoch) are generated from Kafka's definitions into ``reference_broker.internal_records``;
the protocol codec encodes and decodes them, so no byte layout is written by hand.

A record's key is ``int16 key version`` + TransactionLogKey (the transactional id); its value is
``int16 value version`` + TransactionLogValue, or null (a tombstone: the id expired).
"""

from __future__ import annotations

import dataclasses
import struct

from reference_broker.coordinator.group.records import java_string_hash
from reference_broker.coordinator.txn.state import TransactionMetadata, TxnState
from reference_broker.internal_records import TransactionLogKey, TransactionLogValue
from sdk.protocol.codec import decode, encode
from sdk.protocol.messages import Message

KEY_VERSION = 0
#: Kafka 3.x/4.x writes value version 1 (flexible) once the metadata version allows it.
VALUE_VERSION = 1


def _versioned(version: int, msg: Message) -> bytes:
    return struct.pack(">h", version) + encode(msg, version)


def key(transactional_id: str) -> bytes:
    return _versioned(KEY_VERSION, TransactionLogKey(transactional_id=transactional_id))


def value(meta: TransactionMetadata, state: TxnState, partitions: set[tuple[str, int]]) -> bytes:
    """The record for ``meta`` as it will be once in ``state`` with ``partitions``."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    schema = TransactionLogValue.PartitionsSchema
    return _versioned(
        VALUE_VERSION,
        TransactionLogValue(
            producer_id=meta.producer_id,
            previous_producer_id=meta.previous_producer_id,
            next_producer_id=meta.next_producer_id,
            next_producer_epoch=meta.next_producer_epoch,
            client_transaction_version=meta.client_txn_version,
            producer_epoch=meta.producer_epoch,
            transaction_timeout_ms=meta.timeout_ms,
            transaction_status=state.code,
            transaction_partitions=[schema(topic=t, partition_ids=ps) for t, ps in by_topic.items()],
            transaction_last_update_timestamp_ms=meta.last_update_ms,
            transaction_start_timestamp_ms=meta.start_ms,
        ),
    )


@dataclasses.dataclass(frozen=True)
class LoadedValue:
    """One decoded TransactionLogValue."""

    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[tuple[str, int]]
    last_update_ms: int
    start_ms: int
    client_txn_version: int = 0
    next_producer_id: int = -1
    next_producer_epoch: int = -1


def parse_key(data: bytes) -> str | None:
    """The transactional id of a record key, or None for an unknown key version."""
    (version,) = struct.unpack_from(">h", data)
    if version != KEY_VERSION:
        return None
    return decode(TransactionLogKey, memoryview(data)[2:], version).transactional_id


def parse_value(data: bytes) -> LoadedValue:
    (version,) = struct.unpack_from(">h", data)
    v = decode(TransactionLogValue, memoryview(data)[2:], version)
    partitions = {(p.topic, i) for p in (v.transaction_partitions or []) for i in p.partition_ids}
    return LoadedValue(
        v.producer_id,
        v.previous_producer_id,
        v.producer_epoch,
        v.transaction_timeout_ms,
        TxnState.from_code(v.transaction_status),
        partitions,
        v.transaction_last_update_timestamp_ms,
        v.transaction_start_timestamp_ms,
        v.client_transaction_version,
        v.next_producer_id,
        v.next_producer_epoch,
    )


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount``."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(2**31) else abs(h)) % num_partitions
