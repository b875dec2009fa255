"""The C record decoder (sdk.consumer._decode) against its Python twin.

On well-formed batches the two must build equal ConsumerRecords; on damaged bytes the C decoder
either declines (None) or gives exactly what Python gives, never a different answer.
"""

from __future__ import annotations

import random

import pytest

from sdk.consumer import fetch_records
from sdk.consumer.fetch_records import decode_batch_records, decode_records_python
from sdk.records import Compression, RecordBatch, RecordBatchBuilder
from sdk.records.errors import CorruptRecordError

pytestmark = pytest.mark.skipif(not fetch_records.COMPILED, reason="sdk.consumer._decode is not built")


def random_batch(rng: random.Random, base_offset: int = 0) -> bytes:
    builder = RecordBatchBuilder(Compression.NONE, base_offset=base_offset)
    for i in range(rng.randint(1, 40)):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.choice((0, 1, 5, 200, 9000)))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 3, 100, 127, 128, 20000)))
        headers = []
        for h in range(rng.choice((0, 0, 1, 3))):
            name = rng.choice(("a", "trace-id", "é", "")) + str(h)
            headers.append((name, rng.choice((None, b"", b"v" * 300))))
        builder.append(rng.randint(-5, 2**42) if i == 0 else 1_700_000_000_000 + i, key, value, headers)
    return builder.build()


def section(raw: bytes) -> tuple:
    batch = RecordBatch(raw)
    data, pos, end = batch._records_section()
    return data, pos, end, batch.record_count, batch.base_offset, batch.base_timestamp


def as_tuples(records):
    return [
        (r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.checksum,
         r.serialized_key_size, r.serialized_value_size, tuple(r.headers))
        for r in records
    ]


@pytest.mark.parametrize("seed", range(40))
def test_c_and_python_decoders_agree_on_well_formed_batches(seed):
    rng = random.Random(seed)
    raw = random_batch(rng, base_offset=rng.choice((0, 17, 2**40)))
    data, pos, end, count, base_offset, base_ts = section(raw)
    min_offset = base_offset + rng.randint(0, 3)
    for fixed_ts, ts_type in ((None, 0), (1_234, 1)):
        args = (data, pos, end, count, base_offset, base_ts, fixed_ts, ts_type, min_offset, "topic", 5)
        compiled = fetch_records._compiled_decode(*args)
        assert compiled is not None
        assert as_tuples(compiled) == as_tuples(decode_records_python(*args))


@pytest.mark.parametrize("seed", range(60))
def test_c_decoder_declines_or_agrees_on_damaged_bytes(seed):
    rng = random.Random(1000 + seed)
    raw = bytearray(random_batch(rng))
    data, pos, end, count, base_offset, base_ts = section(bytes(raw))
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        damaged[rng.randrange(pos, end)] = rng.randrange(256)
    if rng.random() < 0.3:
        count += rng.choice((-1, 1))
    args = (bytes(damaged), pos, end, count, base_offset, base_ts, None, 0, 0, "t", 0)
    compiled = fetch_records._compiled_decode(*args)
    try:
        expected = as_tuples(decode_records_python(*args))
    except CorruptRecordError:
        assert compiled is None
        return
    if compiled is not None:
        assert as_tuples(compiled) == expected


def test_bounds_outside_the_buffer_are_declined():
    data, pos, end, count, _, _ = section(random_batch(random.Random(7)))
    decode = fetch_records._compiled_decode
    assert decode(data, pos, len(data) + 10, count, 0, 0, None, 0, 0, "t", 0) is None
    assert decode(data, end, pos, count, 0, 0, None, 0, 0, "t", 0) is None
    assert decode(data, pos, end, -1, 0, 0, None, 0, 0, "t", 0) is None


def test_the_consumer_path_uses_the_c_decoder_for_compressed_batches_too():
    builder = RecordBatchBuilder(Compression.ZSTD, base_offset=3)
    for i in range(5):
        builder.append(100 + i, b"k", b"v%d" % i, [("h", b"1")])
    records = decode_batch_records(RecordBatch(builder.build()), "t", 1, 4, True)
    assert [(r.offset, r.value, r.headers) for r in records] == [
        (o, b"v%d" % (o - 3), (("h", b"1"),)) for o in range(4, 8)
    ]


def test_consumer_record_annotates_like_aiokafkas_and_compares_by_value():
    from sdk.consumer import ConsumerRecord

    assert ConsumerRecord[str, bytes] is not None
    fields = ("t", 1, 5, 1000, 0, b"k", b"v", None, 1, 1, (("h", b"x"),))
    assert ConsumerRecord(*fields) == ConsumerRecord(*fields[:-1], [("h", b"x")])
    assert ConsumerRecord(*fields) != ConsumerRecord(*fields[:2], 6, *fields[3:])
    assert "offset=5" in repr(ConsumerRecord(*fields))
