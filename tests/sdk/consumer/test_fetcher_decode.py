"""The consumer's record decoding (``decode_batch_records``) on the C reader and its Python twin.

On well-formed batches both build equal ConsumerRecords; on damaged bytes both raise the same
error (tests/records/test_reader.py compares the two readers in depth).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import crc32c
import pytest

from sdk.consumer.fetch_records import decode_batch_records
from sdk.records import Compression, RecordBatch, RecordBatchBuilder, _reader_py, reader
from sdk.records.errors import CorruptRecordError

READERS = {"c": reader.core if reader.COMPILED else None, "python": _reader_py}


@pytest.fixture(params=sorted(READERS))
def reader_core(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    core = READERS[request.param]
    if core is None:
        pytest.skip("sdk.records._reader is not built")
    monkeypatch.setattr(reader, "core", core)
    yield core


def random_batch(rng: random.Random, base_offset: int = 0, codec: Compression = Compression.NONE) -> bytes:
    builder = RecordBatchBuilder(codec, base_offset=base_offset)
    for i in range(rng.randint(1, 40)):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.choice((0, 1, 5, 200, 9000)))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 3, 100, 127, 128, 20000)))
        headers = []
        for h in range(rng.choice((0, 0, 1, 3))):
            name = rng.choice(("a", "trace-id", "é", "")) + str(h)
            headers.append((name, rng.choice((None, b"", b"v" * 300))))
        builder.append(rng.randint(-5, 2**42) if i == 0 else 1_700_000_000_000 + i, key, value, headers)
    return builder.build()


def as_tuples(records: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.checksum,
         r.serialized_key_size, r.serialized_value_size, tuple(r.headers))
        for r in records
    ]


def decode_on(core: ModuleType, raw: bytes, min_offset: int) -> list[tuple[Any, ...]] | tuple[Any, ...]:
    original = reader.core
    reader.core = core
    try:
        return as_tuples(decode_batch_records(RecordBatch(raw), "topic", 5, min_offset, True))
    except CorruptRecordError as exc:
        return type(exc), exc.reason, exc.offset
    finally:
        reader.core = original


@pytest.mark.skipif(not reader.COMPILED, reason="sdk.records._reader is not built")
@pytest.mark.parametrize("seed", range(40))
def test_c_and_python_readers_agree_on_well_formed_batches(seed: int) -> None:
    rng = random.Random(seed)
    codec = rng.choice(list(Compression))
    raw = random_batch(rng, base_offset=rng.choice((0, 17, 2**40)), codec=codec)
    min_offset = RecordBatch(raw).base_offset + rng.randint(0, 3)
    expected = decode_on(_reader_py, raw, min_offset)
    assert isinstance(expected, list)
    assert decode_on(reader.core, raw, min_offset) == expected


@pytest.mark.skipif(not reader.COMPILED, reason="sdk.records._reader is not built")
@pytest.mark.parametrize("seed", range(60))
def test_c_and_python_readers_raise_alike_on_damaged_bytes(seed: int) -> None:
    rng = random.Random(1000 + seed)
    raw = bytearray(random_batch(rng))
    for _ in range(rng.randint(1, 4)):
        raw[rng.randrange(61, len(raw))] = rng.randrange(256)
    if rng.random() < 0.3:
        raw[60] ^= 1  # the record count's low byte
    raw[17:21] = crc32c.crc32c(bytes(raw[21:])).to_bytes(4, "big")  # the damage reaches the reader
    damaged = bytes(raw)
    assert decode_on(reader.core, damaged, 0) == decode_on(_reader_py, damaged, 0)


def test_log_append_time_and_min_offset(reader_core: ModuleType) -> None:
    builder = RecordBatchBuilder(Compression.ZSTD, base_offset=3, timestamp_type=1)
    for i in range(5):
        builder.append(100 + i, b"k", b"v%d" % i, [("h", b"1")])
    batch = RecordBatch(builder.build())
    records = decode_batch_records(batch, "t", 1, 4, True)
    assert [(r.offset, r.value, r.headers, r.timestamp_type) for r in records] == [
        (o, b"v%d" % (o - 3), (("h", b"1"),), 1) for o in range(4, 8)
    ]
    assert {r.timestamp for r in records} == {batch.max_timestamp}


def test_consumer_record_annotates_like_aiokafkas_and_compares_by_value() -> None:
    from sdk.consumer import ConsumerRecord

    assert ConsumerRecord[str, bytes] is not None
    fields = ("t", 1, 5, 1000, 0, b"k", b"v", None, 1, 1, (("h", b"x"),))
    assert ConsumerRecord(*fields) == ConsumerRecord(*fields[:-1], [("h", b"x")])
    assert ConsumerRecord(*fields) != ConsumerRecord(*fields[:2], 6, *fields[3:])
    assert "offset=5" in repr(ConsumerRecord(*fields))
