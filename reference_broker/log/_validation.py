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
* every record is walked (decompressing once if needed, see ``sdk.records.walk_batch_records``:
  framing only, no record objects): each record must fill its length exactly, the record count
  must match, offset deltas must be 0..n-1, compacted topics require keys
  (``InvalidRecordError``); with ``CreateTime``, timestamps outside
  ``message.timestamp.before/after.max.ms`` and client batches claiming ``LogAppendTime`` ->
  ``InvalidTimestampError``. The two per-record checks (key, timestamp) go on past the first
  record at fault, as Kafka's do, and the error lists every such record with its reason in
  ``record_errors`` (KIP-467; :func:`reference_broker.log.results.record_errors_of`);
* the whole append larger than ``segment.bytes`` -> ``RecordListTooLargeError``.

REPLICATION appends (a follower writing what its leader fetched it, Kafka's ``appendAsFollower``)
get the framing and CRC checks only: the leader validated the records, its offsets and batches are
kept as they are, and size and timestamp limits (which the leader applied when it accepted them)
must not make a follower refuse what the leader has.

Batches are then rewritten to the topic's ``compression.type`` (``_recompression``).

For ``CreateTime`` the batch's max timestamp is recomputed from its records and rewritten (with a
new CRC) if the producer got it wrong, as Kafka does, so the time index can be trusted.
"""

from __future__ import annotations

import ctypes

from reference_broker.log._recompression import recompress_batches
from reference_broker.log.config import LONG_MAX, LogConfig
from reference_broker.log.producer_state import AppendOrigin
from reference_broker.log.results import RecordError
from sdk.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    MessageTooLargeError,
    RecordListTooLargeError,
)
from sdk.records import (
    BATCH_HEADER_SIZE,
    CorruptRecordError,
    RecordBatch,
    set_max_timestamp,
    walk_batch_records,
)
from sdk.records.errors import InvalidRecordCountError
from sdk.records.errors import InvalidRecordError as RecordDecodeError

__all__ = ["validate_append"]

_LOG_OVERHEAD = 12
_REPLICATION = AppendOrigin.REPLICATION  # an Enum attribute lookup is slow; every append tests it
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - _LOG_OVERHEAD
_MAGIC_OFFSET = 16


def validate_append(
    records: bytes | bytearray | memoryview,
    config: LogConfig,
    origin: AppendOrigin,
    now_ms: int,
    *,
    in_place: bool = False,
) -> tuple[bytearray | memoryview, list[int]]:
    """Validate ``records``; return the buffer to append (offsets get assigned in it) and the
    batch positions in it.

    That buffer is a private copy of ``records``, or with ``in_place`` (the caller gives the
    records up) ``records`` itself when it is writable: a produce request's records are then
    checked and written where the network layer received them, which saves copying the whole
    request. A rejected append is checked again on a copy, so its error names positions in the
    records, not in the request around them.
    """
    if in_place:
        found = _request_buffer(records)
        if found is not None:
            data, start = found
            try:
                positions = _validate(data, start, len(records), config, origin, now_ms)
            except KafkaError:
                pass  # reported below, as for a copy
            else:
                # Why the ignore below: ``records`` is the request's own bytearray here (``_request_buffer``).
                return _stored(records, positions, config, origin)  # type: ignore[arg-type]
    buf = bytearray(records)
    return _stored(buf, _validate(buf, 0, len(buf), config, origin, now_ms), config, origin)


def _stored(
    buf: bytearray | memoryview, positions: list[int], config: LogConfig, origin: AppendOrigin
) -> tuple[bytearray | memoryview, list[int]]:
    """The validated batches as they are stored: in the topic's ``compression.type`` unless it
    is ``producer`` (a follower keeps its leader's batches)."""
    if origin is _REPLICATION:
        return buf, positions
    return recompress_batches(buf, positions, config)


def _request_buffer(records: bytes | bytearray | memoryview) -> tuple[bytearray, int] | None:
    """The ``bytearray`` a writable view of records looks into and where in it they start.

    The record walker reads columns as strided slices, fast on a ``bytearray`` and ten times
    slower through a ``memoryview``, so the checks run on the buffer the view looks into.
    A view does not say where it starts in that buffer: the two addresses do (ctypes).
    """
    if type(records) is bytearray:
        return records, 0
    if type(records) is not memoryview or records.readonly or not records.nbytes:
        return None
    base = records.obj
    if type(base) is not bytearray or records.format != "B" or not records.c_contiguous:
        return None
    start = ctypes.addressof(ctypes.c_char.from_buffer(records)) - ctypes.addressof(
        ctypes.c_char.from_buffer(base)
    )
    if not 0 <= start <= len(base) - records.nbytes:
        return None
    return base, start


def _validate(
    data: bytearray, start: int, total: int, config: LogConfig, origin: AppendOrigin, now_ms: int
) -> list[int]:
    """Check the ``total`` bytes of batches at ``data[start:]``; their positions from ``start``."""
    positions: list[int] = []
    if total == 0:
        raise InvalidRecordError("the append holds no record batches")
    replication = origin is _REPLICATION
    rel = 0
    while rel < total:
        pos = start + rel
        if total - rel <= _MAGIC_OFFSET:
            raise CorruptMessageError(f"{total - rel} trailing bytes are not a whole batch")
        magic = data[pos + _MAGIC_OFFSET]
        if magic != 2:
            raise InvalidRecordError(f"batch at byte {pos} has magic {magic}; only v2 is accepted")
        if total - rel < BATCH_HEADER_SIZE:
            raise CorruptMessageError(f"{total - rel} trailing bytes are not a whole batch")
        batch = RecordBatch(data, pos)
        if batch.batch_length < _MIN_BATCH_LENGTH:
            raise CorruptMessageError(f"batch at byte {pos} has invalid length {batch.batch_length}")
        size = batch.size_in_bytes
        if rel + size > total:
            raise CorruptMessageError(
                f"batch at byte {pos} claims {size} bytes but only {total - rel} remain"
            )
        if size > config.max_message_bytes and not replication:
            raise MessageTooLargeError(
                f"the record batch size is {size} bytes, which exceeds the maximum configured"
                f" value of {config.max_message_bytes} (max.message.bytes)"
            )
        try:
            batch.validate()
        except CorruptRecordError as exc:
            raise CorruptMessageError(f"record batch at byte {pos} is corrupt: {exc}") from None
        _check_batch(batch, origin)
        if not replication:
            _check_records(data, pos, batch, config, origin, now_ms)
        positions.append(rel)
        rel += size
    if origin is AppendOrigin.CLIENT and len(positions) > 1:
        # Kafka's LogValidator: a v2 produce carries one batch per partition.
        raise InvalidRecordError("Compressed outer record has more than one batch")
    if total > config.segment_size and not replication:
        raise RecordListTooLargeError(
            f"the append is {total} bytes, which exceeds the configured segment size of"
            f" {config.segment_size}"
        )
    return positions


def _check_batch(batch: RecordBatch, origin: AppendOrigin) -> None:
    if batch.is_transactional and batch.producer_id < 0:
        raise InvalidRecordError("transactional batch without a producer id")
    if batch.is_control and batch.producer_id < 0 and origin is not AppendOrigin.REPLICATION:
        # A replica keeps the leader's batches: KRaft's control batches (LeaderChangeMessage,
        # snapshot and voters records) have no producer id.
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
    """The record-level checks, from one :func:`walk_batch_records` pass (no record objects).

    The walk returns the facts every check needs (count, timestamp delta range, first offset gap,
    first null key). When any check fails, or the walk itself raises, the batch is decoded again
    by :func:`_check_records_by_decoding`, the full-decoding check this replaced, so that the
    error reported (its kind, and which record it names when several are wrong) is exactly the one
    that check gave; rejected batches are rare enough for that to cost nothing in practice.
    """
    try:
        walk = walk_batch_records(buf, pos)
    except CorruptRecordError:
        _check_records_by_decoding(buf, pos, batch, config, origin, now_ms)
        raise AssertionError("the record walk and the decoder disagree") from None
    create_time = not config.log_append_time
    count = walk.count
    if count:
        base = batch.base_timestamp
        max_ts = max(-1, base + walk.max_timestamp_delta)
        before = config.message_timestamp_before_max_ms
        after = config.message_timestamp_after_max_ms
        ts_suspect = create_time and (
            (after < LONG_MAX and max_ts - now_ms > after)
            or (before < LONG_MAX and now_ms - (base + walk.min_timestamp_delta) > before)
        )
        null_key = config.compacted and walk.first_null_key >= 0 and not batch.is_control
        if walk.first_offset_gap >= 0 or null_key or ts_suspect:
            # Raises the problem (listing every record refused); returns only when the timestamps
            # that looked out of range were negative ones, which Kafka does not check.
            _check_records_by_decoding(buf, pos, batch, config, origin, now_ms)
            if walk.first_offset_gap >= 0 or null_key:
                raise AssertionError("the record walk and the decoder disagree")
    if origin is AppendOrigin.CLIENT and count - 1 != batch.last_offset_delta:
        raise InvalidRecordError("the records do not reach the batch's last offset delta")
    if create_time and count and batch.timestamp_type == 0 and max_ts != batch.max_timestamp:
        set_max_timestamp(buf, pos, max_ts)


def _check_records_by_decoding(
    buf: bytearray,
    pos: int,
    batch: RecordBatch,
    config: LogConfig,
    origin: AppendOrigin,
    now_ms: int,
) -> None:
    """The record checks done by decoding every record: the reference for :func:`_check_records`.

    This was the whole check before the walker; it now runs only to report a failure exactly as
    it always was reported (and tests compare the two). A framing problem is raised at the first
    record that has one; records refused for their key or timestamp are all collected first and
    raised together (:func:`_records_refused`). Otherwise fixes the max timestamp as
    :func:`_check_records` does.
    """
    create_time = not config.log_append_time
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    check_ts = create_time and (before < LONG_MAX or after < LONG_MAX)
    null_keys_refused = config.compacted and not batch.is_control
    max_ts = -1
    expected_delta = 0
    refused: list[RecordError] = []
    timestamps_refused = False
    try:
        for record in RecordBatch(buf, pos).iter_records(check_crc=False):
            if record.offset - batch.base_offset != expected_delta:
                raise InvalidRecordError(
                    f"record {expected_delta} of the batch at byte {pos} has offset delta"
                    f" {record.offset - batch.base_offset}"
                )
            index = expected_delta
            expected_delta += 1
            ts = record.timestamp
            if ts > max_ts:
                max_ts = ts
            # Kafka's LogValidator.validateRecord: at most one error per record, the key's first.
            if null_keys_refused and record.key is None:
                refused.append(RecordError(index, "Compacted topic cannot accept message without key"))
            elif check_ts and ts >= 0 and (now_ms - ts > before or ts - now_ms > after):
                timestamps_refused = True
                refused.append(RecordError(index, _timestamp_problem(ts, index, now_ms, before, after)))
    except (InvalidRecordCountError, RecordDecodeError) as exc:
        raise InvalidRecordError(f"batch at byte {pos}: {exc}") from None
    except CorruptRecordError as exc:
        raise CorruptMessageError(f"batch at byte {pos}: {exc}") from None
    if refused:
        raise _records_refused(refused, timestamps_refused)
    if origin is AppendOrigin.CLIENT and expected_delta - 1 != batch.last_offset_delta:
        raise InvalidRecordError("the records do not reach the batch's last offset delta")
    if create_time and expected_delta and batch.timestamp_type == 0 and max_ts != batch.max_timestamp:
        set_max_timestamp(buf, pos, max_ts)


def _timestamp_problem(ts: int, index: int, now_ms: int, before: int, after: int) -> str:
    low = now_ms - before if before < LONG_MAX else "-inf"
    high = now_ms + after if after < LONG_MAX else "+inf"
    return (
        f"Timestamp {ts} of record {index} is out of range. The timestamp should be within [{low}, {high}]"
        " (message.timestamp.before.max.ms / after.max.ms)"
    )


def _records_refused(refused: list[RecordError], timestamps: bool) -> KafkaError:
    """Kafka's ``LogValidator.processRecordErrors``: one error for the batch that names every record
    at fault (``record_errors``, see :func:`reference_broker.log.results.record_errors_of`);
    INVALID_TIMESTAMP if any record's timestamp is out of range, INVALID_RECORD otherwise."""
    error: KafkaError
    if timestamps:
        error = InvalidTimestampError("One or more records have been rejected due to invalid timestamp")
    else:
        shown = ", ".join(f"record {e.batch_index}: {e.message}" for e in refused[:3])
        error = InvalidRecordError(
            f"One or more records have been rejected due to {len(refused)} record errors in total,"
            f" and only showing the first three errors at most: [{shown}]"
        )
    error.record_errors = tuple(refused)  # type: ignore[union-attr]  # an extra attribute, read by record_errors_of
    return error
