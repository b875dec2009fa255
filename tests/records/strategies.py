"""Hypothesis strategies and byte helpers shared by the sdk.records tests."""

from __future__ import annotations

import struct

import crc32c
from hypothesis import strategies as st

from sdk.records import (
    Compression,
    InvalidRecordCountError,
    InvalidRecordError,
    InvalidVarintError,
    RecordBatchBuilder,
)

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Realistic epoch-millisecond timestamps; deltas between them stay well inside a varlong.
TIMESTAMPS = st.integers(0, 2**45)

maybe_bytes = st.none() | st.binary(max_size=64)
header = st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16))
headers = st.lists(header, max_size=3)
record = st.tuples(TIMESTAMPS, maybe_bytes, maybe_bytes, headers)
records = st.lists(record, max_size=20)
codecs = st.sampled_from(list(Compression))


@st.composite
def batch_specs(draw: st.DrawFn) -> dict:
    """Builder keyword arguments plus the records to append."""
    return {
        "compression": draw(codecs),
        "base_offset": draw(st.integers(0, 2**62)),
        "producer_id": draw(st.integers(-1, 2**62)),
        "producer_epoch": draw(st.integers(-1, 2**15 - 1)),
        "base_sequence": draw(st.integers(-1, 2**31 - 1)),
        "is_transactional": draw(st.booleans()),
        "is_control": draw(st.booleans()),
        "partition_leader_epoch": draw(st.integers(-1, 2**31 - 1)),
        "timestamp_type": draw(st.sampled_from([0, 1])),
        "records": draw(records),
    }


def build(spec: dict) -> bytes:
    """Build the batch a :func:`batch_specs` example describes."""
    kwargs = dict(spec)
    recs = kwargs.pop("records")
    builder = RecordBatchBuilder(kwargs.pop("compression"), **kwargs)
    for ts, key, value, hdrs in recs:
        builder.append(ts, key, value, hdrs)
    return builder.build()


def fix_crc(batch: bytearray | bytes, pos: int = 0) -> bytes:
    """Recompute the CRC of the (possibly edited) batch at ``pos`` so only the edit is wrong."""
    out = bytearray(batch)
    (length,) = struct.unpack_from(">i", out, pos + 8)
    end = min(len(out), pos + 12 + length)
    struct.pack_into(">I", out, pos + 17, crc32c.crc32c(bytes(out[pos + 21 : end])))
    return bytes(out)


def raw_batch(records_section: bytes, record_count: int, attributes: int = 0) -> bytes:
    """A batch around hand-written record bytes, with a correct length and CRC."""
    header = struct.pack(
        ">qiibIhiqqqhii",
        0,
        49 + len(records_section),
        -1,
        2,
        0,
        attributes,
        max(record_count - 1, 0),
        1000,
        1000,
        -1,
        -1,
        -1,
        record_count,
    )
    return fix_crc(header + records_section)


# A well-formed record: length 8, attrs, ts 0, offset 0, null key, value b"ab", no headers.
GOOD = b"\x10\x00\x00\x00\x01\x04ab\x00"

#: Hand-written records sections, the record count their batch claims, and the error reading them
#: must raise.
MALFORMED_SECTIONS = [
    (GOOD, -1, InvalidRecordCountError),  # negative count
    (GOOD, 2, InvalidRecordCountError),  # more records claimed than present
    (GOOD * 2, 1, InvalidRecordCountError),  # bytes left over
    (b"\x12" + GOOD[1:] + b"\x00", 1, InvalidRecordError),  # length too long for fields
    (b"\x0e" + GOOD[1:], 1, InvalidRecordError),  # length too short for fields
    (b"\x7e" + GOOD[1:], 1, InvalidRecordError),  # length overruns the batch
    (b"\x01" + GOOD[1:], 1, InvalidRecordError),  # negative length
    (GOOD[:-1], 1, InvalidRecordError),  # cut off at the end
    (b"\x10\x00\x00\x00\x01\x14ab\x00", 1, InvalidRecordError),  # value overruns
    (b"\x10\x00\x00\x00\x0aab\x00\x00", 1, InvalidRecordError),  # key overruns
    (b"\x14\x00\x00\x00\x01\x04ab\x01\x00\x01", 1, InvalidRecordError),  # negative headers
    (b"\x14\x00\x00\x00\x01\x04ab\x02\x01x\x01", 1, InvalidRecordError),  # negative key len
    (b"\x14\x00\x00\x00\x01\x04ab\x02\x02\xff\x01", 1, InvalidRecordError),  # not UTF-8
    (b"\x14\x00\x00\x00\x01\x04ab\x7e\x02h\x01", 1, InvalidRecordError),  # too many headers
    (b"\x14\x00\x00\x00\x01\x04ab\x02\x02h\x08", 1, InvalidRecordError),  # header value overruns
    (b"\x20\x00" + b"\x80" * 10 + b"\x01\x00\x01\x01\x00", 1, InvalidVarintError),  # 11-byte ts
    (b"\x80\x80\x80\x80\x80\x01", 1, InvalidVarintError),  # 6-byte length varint
]
