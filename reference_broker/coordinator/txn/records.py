"""The ``__transaction_state`` record formats, as Kafka's transaction coordinator writes them.

Kafka defines them in ``transaction-coordinator/src/main/resources/common/message``
(TransactionLogKey v0, TransactionLogValue v0-1, v1 flexible with four tagged fields:
PreviousProducerId, NextProducerId, ClientTransactionVersion and KIP-939's NextProducerEpoch). They are
declared here as codec tables, like ``coordinator/group/records.py`` does, so no byte layout is
written by hand.

A record's key is ``int16 key version`` + TransactionLogKey (the transactional id); its value is
``int16 value version`` + TransactionLogValue, or null (a tombstone: the id expired).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from reference_broker.coordinator.group.records import java_string_hash
from reference_broker.coordinator.txn.state import TransactionMetadata, TxnState
from sdk.protocol import messages
from sdk.protocol.codec import decode, encode
from sdk.protocol.messages import Message

OPEN = 0x7FFF


def _field(name: str, type_: str, versions: tuple[int, int], default: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "array": False, "versions": versions, "default": default, **extra}


SCHEMAS: list[dict[str, Any]] = [
    {
        "name": "TransactionLogKey",
        "valid": (0, 0),
        "flexible": None,
        "fields": [_field("transactional_id", "string", (0, OPEN), "")],
    },
    {
        "name": "TransactionLogValue",
        "valid": (0, 1),
        "flexible": (1, OPEN),
        "fields": [
            _field("producer_id", "int64", (0, OPEN), 0),
            _field("previous_producer_id", "int64", (1, OPEN), -1, tag=0, tagged=(1, OPEN)),
            _field("next_producer_id", "int64", (1, OPEN), -1, tag=1, tagged=(1, OPEN)),
            _field("producer_epoch", "int16", (0, OPEN), 0),
            _field("transaction_timeout_ms", "int32", (0, OPEN), 0),
            _field("transaction_status", "int8", (0, OPEN), 0),
            {
                "name": "transaction_partitions",
                "type": "PartitionsSchema",
                "array": True,
                "versions": (0, OPEN),
                "nullable": (0, OPEN),
                "struct": "PartitionsSchema",
                "fields": [
                    _field("topic", "string", (0, OPEN), ""),
                    {
                        "name": "partition_ids",
                        "type": "int32",
                        "array": True,
                        "versions": (0, OPEN),
                        "default": "[]",
                    },
                ],
                "default": "[]",
            },
            _field("transaction_last_update_timestamp_ms", "int64", (0, OPEN), 0),
            _field("transaction_start_timestamp_ms", "int64", (0, OPEN), 0),
            _field("client_transaction_version", "int16", (1, OPEN), 0, tag=2, tagged=(1, OPEN)),
            _field("next_producer_epoch", "int16", (1, OPEN), -1, tag=3, tagged=(1, OPEN)),
        ],
    },
]


def _build(table: dict[str, Any]) -> Any:
    """A message class made from ``table`` at import; it is ``Any`` to a type checker, which cannot
    see fields that come from a table (Kafka's own messages have a generated stub instead)."""
    cls = messages._build_struct(table["name"], table["name"], table["fields"], {})
    cls.API_KEY = None
    cls.KIND = "data"
    cls.VALID_VERSIONS = table["valid"]
    cls.FLEXIBLE_FROM = table["flexible"][0] if table["flexible"] else None
    return cls


TransactionLogKey, TransactionLogValue = (_build(t) for t in SCHEMAS)

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
