"""The fetch path: decoding buffered responses into ConsumerRecords, transactions, errors.

The decoding tests build response bytes with ``RecordBatchBuilder``/``build_control_batch``; the
read_committed test writes transactional batches and markers into a real reference broker's log
(in-process, through its Produce path and its WriteTxnMarkers entry point, ``append_control``) and
reads them with the Consumer, since the SDK has no transactional producer yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from reference_broker.testing import InProcessBroker, run_in_process
from sdk.client.cluster import TopicPartition
from sdk.consumer import Consumer
from sdk.consumer.errors import CorruptRecordInFetchError, RecordTooLargeForFetchError
from sdk.consumer.fetch_records import PartitionRecords, decode_batch_records
from sdk.errors import SerializationError
from sdk.records import (
    Compression,
    ControlType,
    RecordBatch,
    RecordBatchBuilder,
    _reader_py,
    build_control_batch,
    reader,
)
from tests.sdk.conftest import KafkaTarget

TP = TopicPartition("t", 3)


@pytest.fixture(autouse=True, params=["compiled", "python"])
def decoder(request, monkeypatch):
    """Every test runs with the C record reader (when built) and with its Python twin."""
    if request.param == "python":
        monkeypatch.setattr(reader, "core", _reader_py)
    elif not reader.COMPILED:
        pytest.skip("sdk.records._reader is not built")
    return request.param


def batch(
    base_offset: int,
    values: list[bytes | None],
    *,
    compression: Compression = Compression.NONE,
    pid: int = -1,
    txn: bool = False,
    headers: tuple[tuple[str, bytes | None], ...] = (),
    key: bytes | None = b"k",
    ts: int = 1_000,
) -> bytes:
    builder = RecordBatchBuilder(
        compression,
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1,
        is_transactional=txn,
    )
    for i, value in enumerate(values):
        builder.append(ts + i, key, value, headers)
    return builder.build()


def drain(part: PartitionRecords, step: int = 1000) -> list[tuple[int, bytes | None]]:
    out = []
    while True:
        records = part.take(step)
        if not records:
            return out
        out.extend((r.offset, r.value) for r in records)


def records_of(data: bytes, fetch_offset: int = 0, **kwargs) -> PartitionRecords:
    kwargs.setdefault("aborted", None)
    kwargs.setdefault("read_committed", False)
    kwargs.setdefault("check_crcs", True)
    return PartitionRecords(TP, fetch_offset, data, **kwargs)


@pytest.mark.parametrize("compression", list(Compression))
def test_decoder_matches_the_record_reader_for_every_codec(compression):
    headers = (("a", b"1"), ("nil", None))
    values = [b"x" * n for n in (0, 1, 127, 128, 300, 20_000)] + [None]
    raw = batch(40, values, compression=compression, headers=headers, key=None)
    decoded = decode_batch_records(RecordBatch(raw), "t", 3, 0, True)
    reference = list(RecordBatch(raw))
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in decoded] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in reference
    ]
    first = decoded[0]
    assert (first.topic, first.partition, first.timestamp_type, first.checksum) == ("t", 3, 0, None)
    assert [r.serialized_value_size for r in decoded] == [0, 1, 127, 128, 300, 20_000, -1]
    assert {r.serialized_key_size for r in decoded} == {-1}


def test_records_before_the_fetch_offset_are_skipped_and_position_follows():
    data = batch(0, [b"a", b"b", b"c"]) + batch(3, [b"d", b"e"])
    part = records_of(data, fetch_offset=1)
    first = part.take(1)
    assert [(r.offset, r.value) for r in first] == [(1, b"b")] and part.next_offset == 2
    assert drain(part, 2) == [(2, b"c"), (3, b"d"), (4, b"e")]
    assert part.next_offset == 5 and part.exhausted


def test_a_truncated_last_batch_is_normal_and_control_batches_are_skipped():
    marker = build_control_batch(ControlType.COMMIT, 7, 0, 0, base_offset=2)
    full = batch(0, [b"a", b"b"]) + marker + batch(3, [b"c"])
    cut = full + batch(4, [b"d" * 50])[:30]
    part = records_of(cut)
    assert drain(part) == [(0, b"a"), (1, b"b"), (3, b"c")]
    assert part.next_offset == 4


def test_trailing_control_batch_still_moves_the_position():
    data = batch(0, [b"a"]) + build_control_batch(ControlType.ABORT, 7, 0, 0, base_offset=1)
    part = records_of(data)
    assert drain(part) == [(0, b"a")]
    assert part.next_offset == 2


def test_only_part_of_a_batch_is_an_error_that_names_the_offset():
    part = records_of(batch(10, [b"x" * 100])[:50], fetch_offset=10)
    with pytest.raises(RecordTooLargeForFetchError) as info:
        part.take(10)
    assert info.value.offset == 10 and info.value.partition == TP


def test_corrupt_crc_raises_after_the_good_records_unless_crc_checks_are_off():
    bad = bytearray(batch(2, [b"c", b"d"]))
    bad[30] ^= 0x01  # base timestamp: covered by the CRC, harmless to the record walk
    data = batch(0, [b"a", b"b"]) + bytes(bad)
    part = records_of(data)
    assert [(r.offset, r.value) for r in part.take(10)] == [(0, b"a"), (1, b"b")]
    with pytest.raises(CorruptRecordInFetchError) as info:
        part.take(10)
    assert info.value.offset == 2
    unchecked = records_of(data, check_crcs=False)
    assert [o for o, _ in drain(unchecked)] == [0, 1, 2, 3]


def test_deserializers_apply_to_keys_and_values():
    part = records_of(
        batch(0, [b"1", b"2"]), key_deserializer=lambda k: k.decode(), value_deserializer=lambda v: int(v)
    )
    records = part.take(5)
    assert [(r.key, r.value, r.serialized_value_size) for r in records] == [("k", 1, 1), ("k", 2, 1)]


def test_aborted_transactions_are_dropped_per_producer_until_their_marker():
    a, b = 100, 200
    data = (
        batch(0, [b"a0", b"a1"], pid=a, txn=True)
        + batch(2, [b"plain"])
        + batch(3, [b"b0"], pid=b, txn=True, compression=Compression.ZSTD)
        + build_control_batch(ControlType.ABORT, a, 0, 0, base_offset=4)
        + build_control_batch(ControlType.COMMIT, b, 0, 0, base_offset=5)
        + batch(6, [b"a2"], pid=a, txn=True)  # A's next transaction: committed
        + build_control_batch(ControlType.COMMIT, a, 0, 0, base_offset=7)
        + batch(8, [b"b1"], pid=b, txn=True)
        + build_control_batch(ControlType.ABORT, b, 0, 0, base_offset=9)
    )
    committed = records_of(data, aborted=[(a, 0), (b, 8)], read_committed=True)
    assert drain(committed) == [(2, b"plain"), (3, b"b0"), (6, b"a2")]
    assert committed.next_offset == 10
    uncommitted = records_of(data, aborted=None, read_committed=False)
    assert [v for _, v in drain(uncommitted)] == [b"a0", b"a1", b"plain", b"b0", b"a2", b"b1"]


def test_take_returns_at_most_max_records_across_batches():
    data = b"".join(batch(i * 3, [b"%d" % (i * 3 + j) for j in range(3)]) for i in range(4))
    part = records_of(data)
    sizes = []
    while records := part.take(5):
        sizes.append(len(records))
    assert sizes == [5, 5, 2] and part.next_offset == 12


# -- read_committed against the reference broker ---------------------------------------------------


@pytest.fixture
def runner() -> Iterator[InProcessBroker]:
    with run_in_process(config={"num.partitions": 1}) as broker:
        yield broker


def _produce_raw(runner: InProcessBroker, topic: str, data: bytes) -> int:
    result = runner.call(lambda: runner.broker.storage.append(topic, 0, data))
    return int(result.base_offset)


def _marker(runner: InProcessBroker, topic: str, kind: ControlType, pid: int) -> None:
    def write() -> None:
        plog = runner.broker.storage.manager.get_log(topic, 0)
        plog.append_control(kind, pid, 0, 0, now_ms=1_000)

    runner.call(write)


def _txn_batch(values: list[bytes], pid: int, seq: int, compression=Compression.NONE) -> bytes:
    builder = RecordBatchBuilder(
        compression, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True
    )
    for i, value in enumerate(values):
        builder.append(1_000 + i, None, value)
    return builder.build()


async def _read_all(bootstrap: str, topic: str, isolation: str, until: int) -> tuple[list, Consumer]:
    consumer = Consumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
    )
    await consumer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    got = []
    async with asyncio.timeout(10):
        while await consumer.position(tp) < until:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                got.extend(r.value for r in records)
    return got, consumer


async def test_read_committed_drops_aborted_transactions_and_stops_at_the_lso(runner):
    topic = await KafkaTarget("reference", runner.bootstrap).create_topic("txn-read", partitions=1)
    a, b = 4001, 4002
    _produce_raw(runner, topic, _txn_batch([b"a0", b"a1"], a, 0))  # 0-1
    _produce_raw(runner, topic, batch(0, [b"plain"]))  # 2
    _produce_raw(runner, topic, _txn_batch([b"b0"], b, 0, Compression.LZ4))  # 3
    _marker(runner, topic, ControlType.ABORT, a)  # 4
    _marker(runner, topic, ControlType.COMMIT, b)  # 5
    _produce_raw(runner, topic, _txn_batch([b"a2", b"a3"], a, 2, Compression.GZIP))  # 6-7
    _marker(runner, topic, ControlType.COMMIT, a)  # 8
    _produce_raw(runner, topic, _txn_batch([b"b1"], b, 1))  # 9: open, so the LSO is 9
    tp = TopicPartition(topic, 0)

    got, consumer = await _read_all(runner.bootstrap, topic, "read_committed", until=9)
    try:
        assert got == [b"plain", b"b0", b"a2", b"a3"]
        assert consumer.last_stable_offset(tp) == 9 and consumer.highwater(tp) == 10
        assert await consumer.end_offsets([tp]) == {tp: 9}
        assert await consumer.getmany(timeout_ms=300) == {}  # b1 stays invisible while open
    finally:
        await consumer.stop()

    got, consumer = await _read_all(runner.bootstrap, topic, "read_uncommitted", until=10)
    try:
        assert got == [b"a0", b"a1", b"plain", b"b0", b"a2", b"a3", b"b1"]
        assert await consumer.end_offsets([tp]) == {tp: 10}
    finally:
        await consumer.stop()


def test_decoder_reads_varints_longer_than_two_bytes():
    values = [b"v" * 70_000]
    raw = batch(2**40, values, key=b"k" * 20_000, ts=2**45)
    (record,) = decode_batch_records(RecordBatch(raw), "t", 0, 0, True)
    assert record.offset == 2**40 and record.timestamp == 2**45
    assert len(record.value) == 70_000 and record.serialized_key_size == 20_000


def test_a_failing_deserializer_stops_at_its_record():
    def value(v: bytes) -> str:
        if v == b"bad":
            raise ValueError("no")
        return v.decode()

    part = records_of(batch(0, [b"a", b"b"]) + batch(2, [b"c", b"bad", b"d"]), value_deserializer=value)
    assert [r.value for r in part.take(10)] == ["a", "b", "c"]
    assert part.next_offset == 3
    with pytest.raises(SerializationError) as info:
        part.take(10)
    assert isinstance(info.value.__cause__, ValueError)
    assert part.next_offset == 3
