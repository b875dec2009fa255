"""Fixtures for the storage-layer tests: batch builders and log factories on real files."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
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


_WRITER = textwrap.dedent(
    """
    import ast, sys
    from reference_broker.log import LogConfig, PartitionLog
    from sdk.records import RecordBatchBuilder
    plog = PartitionLog.open(sys.argv[1], LogConfig(**ast.literal_eval(sys.argv[2])))
    key = ast.literal_eval(sys.argv[3])
    stop_after = ast.literal_eval(sys.argv[4])
    i = 0
    while True:
        if i == stop_after:
            sys.stdin.read()  # hold still until killed
        b = RecordBatchBuilder()
        for j in range(i % 4 + 1):
            b.append(i, key, b"%d-%d" % (i, j))
        r = plog.append(b.build(), now_ms=0)
        print(r.base_offset, r.last_offset, flush=True)
        i += 1
    """
)


@pytest.fixture
def killed_writer(log_dir: Path) -> Callable[..., list[tuple[int, int]]]:
    """Append from another process until ``batches`` appends are acknowledged, then kill -9 it.

    Batch ``i`` holds ``i % 4 + 1`` records with values ``b"i-j"``, key ``key`` and timestamp
    ``i``. Returns the acknowledged (base offset, last offset) pairs, in order, including those
    printed before the kill landed. With ``hold`` the writer stops after exactly ``batches``
    appends and waits for the kill, so what the log holds at the kill does not depend on timing.
    """

    def run(
        config: dict[str, int], batches: int, key: bytes | None = None, *, hold: bool = False
    ) -> list[tuple[int, int]]:
        stop_after = batches if hold else None
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(log_dir), repr(config), repr(key), repr(stop_after)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[3],
        )
        assert proc.stdout is not None
        acked: list[tuple[int, int]] = []
        for line in proc.stdout:
            base, last = line.split()
            acked.append((int(base), int(last)))
            if len(acked) >= batches:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        for line in proc.stdout:
            fields = line.split()
            if line.endswith("\n") and len(fields) == 2:  # a line cut by the kill was not acked
                acked.append((int(fields[0]), int(fields[1])))
        return acked

    return run
