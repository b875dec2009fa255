"""Hypothesis strategies and byte helpers shared by the sdk.records tests."""

from __future__ import annotations

import struct

import crc32c
from hypothesis import strategies as st

from sdk.records import Compression, RecordBatchBuilder

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
