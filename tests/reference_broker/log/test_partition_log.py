"""PartitionLog append/read semantics, validation errors, retention, DeleteRecords, flushing."""

from __future__ import annotations

import mmap
import os
import struct

import crc32c
import pytest

from reference_broker.log import AppendOrigin, LogConfig, PartitionLog
from reference_broker.log._files import MAP_MIN_BYTES
from sdk.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from sdk.records import Compression, ControlType, RecordBatch, build_control_batch, iter_batches

SMALL = LogConfig(segment_bytes=2_000, index_interval_bytes=100, retention_ms=-1)


def values(data: bytes | memoryview) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for b in iter_batches(bytes(data)) for r in b]


def test_append_assigns_contiguous_offsets_and_reads_back_everything(open_log, make_batch, read_all):
    plog = open_log(SMALL)
    expected = []
    next_offset = 0
    for i in range(120):
        codec = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD][i % 4]
        raw = bytearray(make_batch(i % 7 + 1, tag=i, compression=codec))
        original = bytes(raw)
        result = plog.append(raw, now_ms=5)
        assert raw == original  # the caller's buffer is never modified
        assert (result.base_offset, result.last_offset) == (next_offset, next_offset + i % 7)
        assert result.record_count == i % 7 + 1 and not result.duplicate
        assert result.log_append_time_ms == -1 and result.log_start_offset == 0
        expected += [(next_offset + j, (b"%d:%d:" % (i, j)).ljust(20, b"x")) for j in range(i % 7 + 1)]
        next_offset = result.last_offset + 1
    assert len(plog.segments) > 5
    assert plog.log_end_offset == plog.high_watermark == plog.last_stable_offset == next_offset
    got = [(r.offset, r.value) for b in read_all(plog) for r in b]
    assert got == expected
    whole = plog.read(0, 10**9)
    assert values(whole.data) == expected and whole.next_offset == next_offset


def test_read_starts_at_the_batch_containing_the_offset(open_log, make_batch):
    plog = open_log(SMALL)
    for i in range(30):
        plog.append(make_batch(5, tag=i), now_ms=0)
    for offset in range(0, 150, 7):
        result = plog.read(offset, 1)
        batch = next(iter_batches(bytes(result.data)))
        assert batch.base_offset <= offset <= batch.last_offset
        assert result.first_offset == batch.base_offset and result.next_offset == batch.next_offset


def test_max_bytes_and_min_one_batch(open_log, make_batch):
    plog = open_log(LogConfig(retention_ms=-1))
    small = plog.append(make_batch(1, value_size=10), now_ms=0)
    big = plog.append(make_batch(1, value_size=5_000), now_ms=0)
    plog.append(make_batch(1, value_size=10), now_ms=0)
    sizes = [b.size_in_bytes for b in iter_batches(bytes(plog.read(0, 10**6).data))]
    # whole batches only, never cut: a limit between batches returns the first only
    assert len(plog.read(0, sizes[0] + 100).data) == sizes[0]
    # the first batch is returned even when larger than max_bytes...
    result = plog.read(big.base_offset, 100)
    assert len(result.data) == sizes[1] and result.next_offset == big.base_offset + 1
    # ...unless min_one_batch is off
    empty = plog.read(big.base_offset, 100, min_one_batch=False)
    assert len(empty.data) == 0 and empty.next_offset == big.base_offset
    assert len(plog.read(small.base_offset, sizes[0] + sizes[1]).data) == sizes[0] + sizes[1]


def test_max_offset_excludes_batches_reaching_it(open_log, make_batch):
    plog = open_log(SMALL)
    for i in range(10):
        plog.append(make_batch(3, tag=i), now_ms=0)  # batches [0-2] [3-5] ...
    result = plog.read(0, 10**6, max_offset=7)
    assert [b.last_offset for b in iter_batches(bytes(result.data))] == [2, 5]
    assert result.next_offset == 6
    assert len(plog.read(6, 10**6, max_offset=7).data) == 0
    assert len(plog.read(6, 10**6, max_offset=9).data) > 0


def test_out_of_range_offsets(open_log, make_batch):
    plog = open_log(SMALL)
    for i in range(5):
        plog.append(make_batch(2, tag=i), now_ms=0)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(11, 100)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(-1, 100)
    at_end = plog.read(10, 100)
    assert len(at_end.data) == 0 and at_end.next_offset == 10
    plog.delete_records_before(4)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(3, 100)
    assert next(iter_batches(bytes(plog.read(4, 1).data))).base_offset == 4


def test_large_reads_are_mapped_and_match_small_reads(open_log, make_batch):
    """Reads of at least ``MAP_MIN_BYTES`` come from a file mapping: same bytes and limits as the
    ``pread`` path, starting mid-page, and still readable after their segment is deleted."""
    plog = open_log(LogConfig(retention_ms=-1, segment_bytes=8 << 20))
    while plog.segments[-1].size < 3 * MAP_MIN_BYTES:
        plog.append(make_batch(50, value_size=1_000, tag=plog.log_end_offset), now_ms=0)
    plog.append(make_batch(1, value_size=10), now_ms=0)  # one batch past the first segment end
    plog.roll()
    plog.append(make_batch(1, value_size=10), now_ms=0)
    offset = 50  # starts at a batch boundary that is not page aligned
    mapped = plog.read(offset, 2 * MAP_MIN_BYTES)
    assert isinstance(mapped.data, memoryview) and isinstance(mapped.data.obj, mmap.mmap)
    assert mapped.data.readonly
    pieces, at = [], offset
    while at < mapped.next_offset:  # the same range through small (pread) reads
        part = plog.read(at, 1)
        pieces.append(bytes(part.data))
        at = part.next_offset
    expected = b"".join(pieces)
    assert bytes(mapped.data) == expected and len(expected) <= 2 * MAP_MIN_BYTES
    assert next(iter_batches(expected)).base_offset == offset
    whole = plog.read(0, 10**9)  # up to the end of the first segment, then across into the next
    assert values(whole.data)[-1][0] == plog.log_end_offset - 1
    plog.delete_records_before(plog.log_end_offset)  # deletes the mapped segment
    assert bytes(mapped.data) == expected


def test_read_slices_match_read_and_survive_segment_deletion(open_log, make_batch):
    plog = open_log(SMALL)
    for i in range(60):
        plog.append(make_batch(2, tag=i), now_ms=0)
    expected = bytes(plog.read(0, 5_000).data)
    slices = plog.read_slices(0, 5_000)
    assert len(slices.slices) > 1 and slices.size == len(expected)
    assert slices.next_offset == plog.read(0, 5_000).next_offset
    plog.delete_records_before(plog.log_end_offset)  # deletes the segments being "sent"
    assert not slices.slices[0].path.exists()
    got = b"".join(os.pread(s.fd, s.length, s.position) for s in slices.slices)
    assert got == expected
    fds = [s.fd for s in slices.slices]
    slices.close()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_log_append_time_stamps_batches(open_log, make_batch):
    plog = open_log(LogConfig(message_timestamp_type="LogAppendTime", retention_ms=-1))
    result = plog.append(make_batch(3, ts=5), now_ms=777_000)
    assert result.log_append_time_ms == 777_000
    batch = next(iter_batches(bytes(plog.read(0, 1000).data)))
    batch.validate()
    assert batch.timestamp_type == 1 and batch.max_timestamp == 777_000
    assert [r.timestamp for r in batch] == [777_000] * 3
    assert plog.offset_for_timestamp(776_000) == (0, 777_000)


def test_create_time_max_timestamp_is_recomputed(open_log, make_batch):
    plog = open_log(LogConfig(retention_ms=-1))
    raw = bytearray(make_batch(3, ts=100))
    struct.pack_into(">q", raw, 35, 5)  # producer lies about the max timestamp
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    plog.append(raw, now_ms=0)
    batch = next(iter_batches(bytes(plog.read(0, 1000).data)))
    batch.validate()
    assert batch.max_timestamp == 102
    assert plog.active_segment.max_timestamp == 102


def _corrupt_crc(raw: bytes) -> bytes:
    data = bytearray(raw)
    data[-1] ^= 0xFF
    return bytes(data)


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (lambda b: b"", InvalidRecordError),
        (_corrupt_crc, CorruptMessageError),
        (lambda b: b + b[:30], CorruptMessageError),  # partial trailing batch
        (lambda b: b[:-1], CorruptMessageError),
        (lambda b: b[:16] + b"\x01" + b[17:], InvalidRecordError),  # magic 1
        (lambda b: struct.pack(">q", 5) + b[8:], InvalidRecordError),  # base offset != 0
        (lambda b: b[:8] + struct.pack(">i", 10) + b[12:], CorruptMessageError),
    ],
)
def test_invalid_appends_are_rejected_without_writing(open_log, make_batch, mutate, error):
    plog = open_log(LogConfig(retention_ms=-1))
    plog.append(make_batch(), now_ms=0)
    with pytest.raises(error):
        plog.append(mutate(make_batch(2)), now_ms=0)
    assert plog.log_end_offset == 1
    assert len(list(iter_batches(bytes(plog.read(0, 10**6).data)))) == 1


def test_size_limits(open_log, make_batch):
    plog = open_log(LogConfig(max_message_bytes=500, segment_bytes=1_000, retention_ms=-1))
    with pytest.raises(MessageTooLargeError):
        plog.append(make_batch(1, value_size=600), now_ms=0)
    plog.append(make_batch(1, value_size=400), now_ms=0)
    big = open_log(LogConfig(max_message_bytes=5_000, segment_bytes=1_000, retention_ms=-1))
    with pytest.raises(RecordListTooLargeError):
        big.append(make_batch(1, value_size=1_200), now_ms=0)
    assert big.log_end_offset == 1


def test_one_batch_per_client_append(open_log, make_batch):
    plog = open_log(LogConfig(retention_ms=-1))
    two = make_batch(2, tag=1) + make_batch(3, tag=2)
    with pytest.raises(InvalidRecordError, match="more than one batch"):
        plog.append(two, now_ms=0)
    result = plog.append(two, now_ms=0, origin=AppendOrigin.COORDINATOR)
    assert (result.base_offset, result.last_offset, result.record_count) == (0, 4, 5)
    assert [b.base_offset for b in iter_batches(bytes(plog.read(0, 10**6).data))] == [0, 2]


def test_client_control_batches_and_bad_timestamps_are_rejected(open_log, make_batch):
    plog = open_log(LogConfig(message_timestamp_before_max_ms=1_000, retention_ms=-1))
    marker = build_control_batch(ControlType.COMMIT, 7, 0, 0, timestamp_ms=5_000)
    with pytest.raises(InvalidRecordError):
        plog.append(marker, now_ms=0)
    with pytest.raises(InvalidTimestampError):
        plog.append(make_batch(ts=1_000), now_ms=5_000)
    plog.append(make_batch(ts=4_500), now_ms=5_000)
    assert plog.append(marker, now_ms=5_000, origin=AppendOrigin.COORDINATOR).base_offset == 1


def test_compacted_topic_requires_keys(open_log, make_batch):
    plog = open_log(LogConfig(cleanup_policy=("compact",)))
    with pytest.raises(InvalidRecordError):
        plog.append(make_batch(key=None), now_ms=0)
    plog.append(make_batch(), now_ms=0)


def test_retention_by_time_deletes_old_segments_including_the_active_one(open_log, make_batch):
    plog = open_log(LogConfig(segment_bytes=1_000, retention_ms=10_000))
    for i in range(40):
        plog.append(make_batch(2, ts=100_000 + i * 1_000, tag=i), now_ms=0)
    segments = len(plog.segments)
    assert segments > 3
    cutoff_segment = plog.segments[2]
    now = plog.segments[1].max_timestamp + 10_001  # the first two segments have expired
    assert plog.apply_retention(now) == 2
    assert plog.log_start_offset == cutoff_segment.base_offset
    assert plog.segments[0] is cutoff_segment
    assert plog.apply_retention(now) == 0
    end = plog.log_end_offset
    assert plog.apply_retention(10**9) == segments - 2
    assert len(plog.segments) == 1 and plog.active_segment.size == 0
    assert plog.log_start_offset == plog.log_end_offset == end
    plog.append(make_batch(), now_ms=0)
    assert plog.log_end_offset == end + 1


def test_retention_by_size_keeps_the_newest_bytes(open_log, make_batch):
    plog = open_log(LogConfig(segment_bytes=1_000, retention_ms=-1, retention_bytes=2_500))
    for i in range(60):
        plog.append(make_batch(2, tag=i), now_ms=0)
    total = plog.size_in_bytes
    deleted = plog.apply_retention(0)
    assert deleted > 0
    assert plog.size_in_bytes <= 2_500 + plog.segments[0].size
    assert plog.size_in_bytes >= 2_500 or len(plog.segments) == 1
    assert total - plog.size_in_bytes > 0
    assert plog.log_start_offset == plog.segments[0].base_offset
    unlimited = open_log(LogConfig(retention_ms=-1, retention_bytes=-1))
    assert unlimited.apply_retention(10**12) == 0


def test_delete_records(open_log, make_batch, log_dir):
    plog = open_log(SMALL)
    for i in range(100):
        plog.append(make_batch(2, tag=i), now_ms=0)
    first_segments = len(plog.segments)
    target = plog.segments[3].base_offset + 1
    assert plog.delete_records_before(target) == target
    assert plog.log_start_offset == target
    assert len(plog.segments) == first_segments - 3
    assert not (log_dir / "00000000000000000000.log").exists()
    assert plog.delete_records_before(2) == target  # going back is a no-op
    with pytest.raises(OffsetOutOfRangeError):
        plog.delete_records_before(plog.high_watermark + 1)
    plog.close()
    reopened = open_log(SMALL)
    assert reopened.log_start_offset == target
    assert reopened.delete_records_before(-1) == reopened.high_watermark


def test_flush_messages_advances_the_recovery_point(open_log, make_batch, tmp_path):
    plog = open_log(LogConfig(flush_interval_messages=1, retention_ms=-1))
    plog.append(make_batch(3), now_ms=0)
    assert plog.recovery_point == plog.log_end_offset == 3
    lazy = PartitionLog.open(tmp_path / "lazy-0", LogConfig(segment_bytes=500, retention_ms=-1))
    for i in range(20):
        lazy.append(make_batch(tag=i), now_ms=0)
    assert lazy.recovery_point == 0  # default: no fsync on the append path
    lazy.maybe_flush(now_ms=0)  # periodic: fsync rolled segments
    assert lazy.recovery_point == lazy.active_segment.base_offset > 0


def test_io_error_takes_the_log_offline(open_log, make_batch, monkeypatch):
    plog = open_log(LogConfig(retention_ms=-1))
    plog.append(make_batch(), now_ms=0)

    def broken(*args: object) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "pwrite", broken)
    with pytest.raises(KafkaStorageError):
        plog.append(make_batch(), now_ms=0)
    monkeypatch.undo()
    assert plog.offline_reason is not None
    with pytest.raises(KafkaStorageError):
        plog.read(0, 100)
    with pytest.raises(KafkaStorageError):
        plog.append(make_batch(), now_ms=0)


def test_timestamp_lookups_respect_the_log_start(open_log, make_batch):
    plog = open_log(SMALL)
    for i in range(30):
        plog.append(make_batch(2, ts=1_000 + 10 * i, tag=i), now_ms=0)
    assert plog.offset_for_timestamp(0) == (0, 1_000)
    assert plog.offset_for_timestamp(1_011) == (3, 1_011)
    assert plog.offset_for_timestamp(1_012) == (4, 1_020)
    assert plog.offset_for_timestamp(10_000) is None
    assert plog.max_timestamp_offset() == (59, 1_291)
    plog.delete_records_before(33)
    assert plog.offset_for_timestamp(0) == (33, 1_161)
    assert plog.earliest_offset() == 33 and plog.latest_offset() == 60


def test_header_only_reads(open_log, make_batch, monkeypatch):
    """read() never decodes records (it must not even touch the record iterator)."""
    plog = open_log(SMALL)
    for i in range(20):
        plog.append(make_batch(3, tag=i, compression=Compression.GZIP), now_ms=0)

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("records decoded on the read path")

    monkeypatch.setattr(RecordBatch, "iter_records", forbidden)
    plog.close()
    reopened = open_log(SMALL)
    assert len(reopened.read(0, 10**6).data) == reopened.size_in_bytes


def test_fresh_appends_are_served_without_crc_checks(open_log, make_batch, monkeypatch):
    """Batches this process appended were validated on the way in: reads do not recompute their
    CRC. After a reopen every batch is checked once, on its first read, and never again."""
    plog = open_log(SMALL)
    for i in range(20):
        plog.append(make_batch(3, tag=i), now_ms=0)
    checked: list[int] = []
    check_crc = RecordBatch._check_crc

    def counting(self: RecordBatch) -> None:
        checked.append(self.base_offset)
        check_crc(self)

    monkeypatch.setattr(RecordBatch, "_check_crc", counting)
    assert len(plog.read(0, 10**6).data) == plog.size_in_bytes
    assert checked == []
    plog.close()
    reopened = open_log(SMALL)  # (opening checks the active segment's tail itself)
    checked.clear()
    assert len(reopened.read(0, 10**6).data) == reopened.size_in_bytes
    assert len(checked) == len(set(checked)) and set(checked) <= set(range(0, 60, 3))
    assert len(checked) >= 15  # the batches of closed segments, trusted at open
    checked.clear()
    assert len(reopened.read(0, 10**6).data) == reopened.size_in_bytes
    assert checked == []
    reopened.append(make_batch(2, tag=99), now_ms=0)  # validated (CRC checked) on the way in
    checked.clear()
    assert len(reopened.read(0, 10**6).data) == reopened.size_in_bytes
    assert checked == []
