"""Validation of an append, before any byte reaches the log (Kafka's LogValidator + analyzeRecords).

Checks, in Kafka's order and with Kafka's error for each:

* empty input, or bytes that are not an exact concatenation of whole batches: a partial trailing
  batch, a length below the v2 minimum -> ``CorruptMessageError`` (Kafka silently drops a partial
  trailing batch; this broker refuses the request rather than guess);
* client appends with more than one batch -> ``InvalidRecordError`` (Kafka 2.x+ accepts exactly
  one v2 batch per partition from producers); COORDINATOR appends may hold several batches;
* magic other than 2 -> ``InvalidRecordError`` (produce v3+ only carries magic 2);
* a batch larger than ``max.message.bytes`` -> ``MessageTooLargeError``;
* CRC-32C or compression codec wrong -> ``CorruptMessageError``;
* client appends: base offset not 0, control batches, record count <= 0 or not equal to
  ``lastOffsetDelta + 1``, an idempotent batch without a base sequence -> ``InvalidRecordError``;
  transactional batch without producer id -> ``InvalidRecordError``;
* every record is decoded (decompressing once if needed): the record count must match, offset
  deltas must be 0..n-1, compacted topics require keys (``InvalidRecordError``); with
  ``CreateTime``, timestamps outside ``message.timestamp.before/after.max.ms`` and client batches
  claiming ``LogAppendTime`` -> ``InvalidTimestampError``;
* the whole append larger than ``segment.bytes`` -> ``RecordListTooLargeError``.

For ``CreateTime`` the batch's max timestamp is recomputed from its records and rewritten (with a
new CRC) if the producer got it wrong, as Kafka does, so the time index can be trusted.
"""

from __future__ import annotations

import struct

import crc32c

from reference_broker.log.config import LONG_MAX, LogConfig
from reference_broker.log.producer_state import AppendOrigin
from sdk.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    RecordListTooLargeError,
)
from sdk.records import BATCH_HEADER_SIZE, CorruptRecordError, RecordBatch
from sdk.records.errors import InvalidRecordCountError
from sdk.records.errors import InvalidRecordError as RecordDecodeError

__all__ = ["validate_append"]

_LOG_OVERHEAD = 12
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - _LOG_OVERHEAD
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_CRC_START = 21
_MAX_TIMESTAMP_OFFSET = 35
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")


def validate_append(
    records: bytes | bytearray | memoryview,
    config: LogConfig,
    origin: AppendOrigin,
    now_ms: int,
) -> tuple[bytearray, list[int]]:
    """Validate ``records``; return a private ``bytearray`` copy and the batch positions in it."""
    buf = bytearray(records)
    total = len(buf)
    if total == 0:
        raise InvalidRecordError("the append holds no record batches")
    positions: list[int] = []
    pos = 0
    while pos < total:
        if total - pos <= _MAGIC_OFFSET:
            raise CorruptMessageError(f"{total - pos} trailing bytes are not a whole batch")
        magic = buf[pos + _MAGIC_OFFSET]
        if magic != 2:
            raise InvalidRecordError(f"batch at byte {pos} has magic {magic}; only v2 is accepted")
        if total - pos < BATCH_HEADER_SIZE:
            raise CorruptMessageError(f"{total - pos} trailing bytes are not a whole batch")
        batch = RecordBatch(buf, pos)
        if batch.batch_length < _MIN_BATCH_LENGTH:
            raise CorruptMessageError(f"batch at byte {pos} has invalid length {batch.batch_length}")
        size = batch.size_in_bytes
        if pos + size > total:
            raise CorruptMessageError(
                f"batch at byte {pos} claims {size} bytes but only {total - pos} remain"
            )
        if size > config.max_message_bytes:
            raise MessageTooLargeError(
                f"the record batch size is {size} bytes, which exceeds the maximum configured"
                f" value of {config.max_message_bytes} (max.message.bytes)"
            )
        try:
            batch.validate()
        except CorruptRecordError as exc:
            raise CorruptMessageError(f"record batch at byte {pos} is corrupt: {exc}") from None
        _check_batch(batch, origin)
        _check_records(buf, pos, batch, config, origin, now_ms)
        positions.append(pos)
        pos += size
    if origin is AppendOrigin.CLIENT and len(positions) > 1:
        # Kafka's LogValidator: a v2 produce carries one batch per partition.
        raise InvalidRecordError("Compressed outer record has more than one batch")
    if total > config.segment_bytes:
        raise RecordListTooLargeError(
            f"the append is {total} bytes, which exceeds the configured segment size of"
            f" {config.segment_bytes} (segment.bytes)"
        )
    return buf, positions


def _check_batch(batch: RecordBatch, origin: AppendOrigin) -> None:
    if batch.is_transactional and batch.producer_id < 0:
        raise InvalidRecordError("transactional batch without a producer id")
    if batch.is_control and batch.producer_id < 0:
        raise InvalidRecordError("control batch without a producer id")
    if origin is not AppendOrigin.CLIENT:
        return
    if batch.base_offset != 0:
        raise InvalidRecordError(f"the base offset of a produced batch must be 0, not {batch.base_offset}")
    count = batch.record_count
    if count <= 0:
        raise InvalidRecordError(f"invalid record count {count}")
    if batch.last_offset_delta + 1 != count:
        raise InvalidRecordError(
            f"last offset delta {batch.last_offset_delta} is inconsistent with {count} records"
        )
    if batch.is_control:
        raise InvalidRecordError("clients are not allowed to write control records")
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise InvalidRecordError(
            f"invalid sequence number {batch.base_sequence} for producer {batch.producer_id}"
        )
    if batch.timestamp_type == 1:
        raise InvalidTimestampError("producers must not set the timestamp type to LogAppendTime")


def _check_records(
    buf: bytearray,
    pos: int,
    batch: RecordBatch,
    config: LogConfig,
    origin: AppendOrigin,
    now_ms: int,
) -> None:
    create_time = not config.log_append_time
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    check_ts = create_time and (before < LONG_MAX or after < LONG_MAX)
    max_ts = -1
    expected_delta = 0
    try:
        for record in batch.iter_records(check_crc=False):
            if record.offset - batch.base_offset != expected_delta:
                raise InvalidRecordError(
                    f"record {expected_delta} of the batch at byte {pos} has offset delta"
                    f" {record.offset - batch.base_offset}"
                )
            expected_delta += 1
            if config.compacted and record.key is None and not batch.is_control:
                raise InvalidRecordError("compacted topic cannot accept a record without key")
            ts = record.timestamp
            if ts > max_ts:
                max_ts = ts
            if check_ts and ts >= 0 and (now_ms - ts > before or ts - now_ms > after):
                raise InvalidTimestampError(
                    f"timestamp {ts} of record {expected_delta - 1} is out of the allowed range"
                    " (message.timestamp.before.max.ms / after.max.ms)"
                )
    except (InvalidRecordCountError, RecordDecodeError) as exc:
        raise InvalidRecordError(f"batch at byte {pos}: {exc}") from None
    except CorruptRecordError as exc:
        raise CorruptMessageError(f"batch at byte {pos}: {exc}") from None
    if origin is AppendOrigin.CLIENT and expected_delta - 1 != batch.last_offset_delta:
        raise InvalidRecordError("the records do not reach the batch's last offset delta")
    if create_time and expected_delta and batch.timestamp_type == 0 and max_ts != batch.max_timestamp:
        _set_max_timestamp(buf, pos, batch.size_in_bytes, max_ts)


def _set_max_timestamp(buf: bytearray, pos: int, size: int, timestamp: int) -> None:
    """Rewrite a CreateTime batch's max timestamp and its CRC (Kafka's ``setMaxTimestamp``)."""
    _INT64.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, timestamp)
    _UINT32.pack_into(buf, pos + _CRC_OFFSET, crc32c.crc32c(memoryview(buf)[pos + _CRC_START : pos + size]))
