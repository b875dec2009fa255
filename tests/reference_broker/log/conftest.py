"""Fixtures for the storage-layer tests: batch builders and log factories on real files."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reference_broker.log import LogConfig, PartitionLog
from sdk.records import Compression, RecordBatch, RecordBatchBuilder, iter_batches

BatchFactory = Callable[..., bytes]


def _make_batch(
    count: int = 1,
    *,
    ts: int = 1_000,
    value: bytes | None = None,
    value_size: int = 20,
    key: bytes | None = b"k",
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    txn: bool = False,
    compression: Compression = Compression.NONE,
    tag: int = 0,
) -> bytes:
    """A produced batch of ``count`` records with timestamps ``ts, ts+1, ...``.

    Values start with ``tag`` so tests can tell batches apart after reading them back.
    """
    builder = RecordBatchBuilder(
        compression, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
        is_transactional=txn,
    )
    for i in range(count):
        body = value if value is not None else (b"%d:%d:" % (tag, i)).ljust(value_size, b"x")
        builder.append(ts + i, key, body)
    return builder.build()


@pytest.fixture
def make_batch() -> BatchFactory:
    return _make_batch


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


@pytest.fixture
def open_log(log_dir: Path) -> Iterator[Callable[..., PartitionLog]]:
    """Open (or reopen) the partition log in ``log_dir``; every log opened is closed at the end."""
    opened: list[PartitionLog] = []

    def factory(config: LogConfig | None = None, **kwargs: object) -> PartitionLog:
        kwargs.setdefault("now_ms", 1_000)
        plog = PartitionLog.open(log_dir, config or LogConfig(), **kwargs)  # type: ignore[arg-type]
        opened.append(plog)
        return plog

    yield factory
    for plog in opened:
        plog._close_files()


@pytest.fixture
def read_all() -> Callable[[PartitionLog], list[RecordBatch]]:
    """Every batch from the log start, read in small steps (exercises the read path)."""

    def reader(plog: PartitionLog, step: int = 1) -> list[RecordBatch]:
        out: list[RecordBatch] = []
        offset = plog.log_start_offset
        while offset < plog.log_end_offset:
            result = plog.read(offset, step)
            got = list(iter_batches(bytes(result.data)))
            assert got, f"no progress at offset {offset}"
            out.extend(got)
            offset = result.next_offset
        return out

    return reader
