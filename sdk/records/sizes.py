"""Size bounds of the record format (magic v2), for sizing batches and requests before encoding.

Kafka's ``DefaultRecord.MAX_RECORD_OVERHEAD``/``DefaultRecordBatch.RECORD_BATCH_OVERHEAD`` and
``Records.LOG_OVERHEAD``: a producer reserves memory and fills batches with these upper bounds
(cheaper than encoding varints twice), so they live with the format they describe.
"""

from __future__ import annotations

from collections.abc import Iterable

from sdk.records.header import BATCH_HEADER_SIZE

__all__ = ["BATCH_OVERHEAD", "LOG_OVERHEAD", "RECORD_OVERHEAD", "headers_size", "record_size_bound"]

#: Upper bound of a record's framing inside a batch (length, attributes, timestamp and offset
#: deltas, key/value lengths, header count), as Kafka's ``DefaultRecord.MAX_RECORD_OVERHEAD``.
RECORD_OVERHEAD = 21
#: A batch's header (base offset to record count), Kafka's ``RECORD_BATCH_OVERHEAD``.
BATCH_OVERHEAD = BATCH_HEADER_SIZE
#: The base offset and length every batch in a log starts with, Kafka's ``Records.LOG_OVERHEAD``.
LOG_OVERHEAD = 12


def headers_size(headers: Iterable[tuple[str, bytes | None]]) -> int:
    """Upper bound of the encoded size of a record's headers (count and every key/value)."""
    size = 1
    for key, value in headers:
        size += len(key) + (len(value) if value is not None else 0) + 10
    return size


def record_size_bound(
    key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]] | None
) -> int:
    """Bytes a record can take inside a batch at most (Kafka's upper bound)."""
    size = RECORD_OVERHEAD
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    if headers:
        size += headers_size(headers)
    return size
