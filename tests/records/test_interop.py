"""Oracles: batches from aiokafka's and kafka-python's builders read identically with ours, and
ours read identically with theirs, for every codec each library supports."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.records import Compression, RecordBatch, RecordBatchBuilder, iter_batches

from .oracles import (
    AioBatch,
    AioBuilder,
    AioMemoryRecords,
    KafkaBatch,
    KafkaBuilder,
    KafkaMemoryRecords,
    kafka_codec,
)
from .strategies import records

ALL = list(Compression)
KAFKA_PYTHON = [
    c
    for c in Compression
    if c != Compression.SNAPPY or kafka_codec.has_snappy()  # needs python-snappy
]


def _view(record: object) -> tuple:
    return (
        record.offset,  # type: ignore[attr-defined]
        record.timestamp,  # type: ignore[attr-defined]
        record.key,  # type: ignore[attr-defined]
        record.value,  # type: ignore[attr-defined]
        [(k, None if v is None else bytes(v)) for k, v in record.headers],  # type: ignore[attr-defined]
    )


producer = st.one_of(
    st.just((-1, -1, -1, False)),
    st.tuples(st.integers(0, 2**62), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1), st.booleans()),
)


def _theirs(builder_cls: type, codec: Compression, prod: tuple, recs: list) -> bytes:
    pid, epoch, seq, txn = prod
    builder = builder_cls(
        magic=2,
        compression_type=int(codec),
        is_transactional=int(txn),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 30,
    )
    for offset, (ts, key, value, headers) in enumerate(recs):
        assert builder.append(offset, ts, key, value, headers) is not None
    return bytes(builder.build())


def _ours(codec: Compression, prod: tuple, recs: list) -> bytes:
    pid, epoch, seq, txn = prod
    builder = RecordBatchBuilder(
        codec, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn
    )
    for ts, key, value, headers in recs:
        builder.append(ts, key, value, headers)
    return builder.build()


def _check_ours_reads(data: bytes, reader_cls: type, prod: tuple, n: int) -> None:
    batch = RecordBatch(data)
    batch.validate()
    theirs = reader_cls(data)
    assert [_view(r) for r in batch] == [_view(r) for r in reader_cls(data)]
    assert batch.record_count == n
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == prod[:3]
    assert batch.is_transactional == prod[3]
    assert batch.compression == theirs.compression_type
    assert batch.max_timestamp == theirs.max_timestamp
    assert batch.next_offset == theirs.next_offset


def _check_theirs_read(data: bytes, reader_cls: type, recs: list) -> None:
    theirs = reader_cls(data)
    assert theirs.validate_crc()
    assert [_view(r) for r in theirs] == [_view(r) for r in RecordBatch(data)]
    assert [(r.key, r.value) for r in reader_cls(data)] == [(k, v) for _, k, v, _ in recs]


settings_ = settings(max_examples=40, deadline=None)
nonempty = records.filter(bool)


@settings_
@given(st.sampled_from(ALL), producer, nonempty)
def test_aiokafka_built_read_by_ours(codec: Compression, prod: tuple, recs: list) -> None:
    _check_ours_reads(_theirs(AioBuilder, codec, prod, recs), AioBatch, prod, len(recs))


@settings_
@given(st.sampled_from(ALL), producer, nonempty)
def test_ours_read_by_aiokafka(codec: Compression, prod: tuple, recs: list) -> None:
    _check_theirs_read(_ours(codec, prod, recs), AioBatch, recs)


@settings_
@given(st.sampled_from(KAFKA_PYTHON), producer, nonempty)
def test_kafka_python_built_read_by_ours(codec: Compression, prod: tuple, recs: list) -> None:
    _check_ours_reads(_theirs(KafkaBuilder, codec, prod, recs), KafkaBatch, prod, len(recs))


@settings_
@given(st.sampled_from(KAFKA_PYTHON), producer, nonempty)
def test_ours_read_by_kafka_python(codec: Compression, prod: tuple, recs: list) -> None:
    _check_theirs_read(_ours(codec, prod, recs), KafkaBatch, recs)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KAFKA_PYTHON), nonempty), min_size=1, max_size=4))
def test_memory_records_agree_on_concatenations(parts: list) -> None:
    buf = b"".join(_ours(codec, (-1, -1, -1, False), recs) for codec, recs in parts)
    ours = [[_view(r) for r in batch] for batch in iter_batches(buf)]
    for memory_records in (AioMemoryRecords(buf), KafkaMemoryRecords(buf)):
        theirs = []
        while memory_records.has_next():
            theirs.append([_view(r) for r in memory_records.next_batch()])
        assert theirs == ours


def test_large_batch_all_codecs_both_ways() -> None:
    recs = [(1_700_000_000_000 + i, b"key-%d" % i, b"v" * (i % 300), []) for i in range(2000)]
    prod = (77, 1, 5, True)
    for codec in ALL:
        _check_ours_reads(_theirs(AioBuilder, codec, prod, recs), AioBatch, prod, len(recs))
        _check_theirs_read(_ours(codec, prod, recs), AioBatch, recs)
