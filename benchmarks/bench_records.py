"""Record batch throughput: sdk.records (pure Python) against aiokafka (Cython extensions).

Builds and reads batches of 1000 records (12-byte key, 100-byte value), uncompressed and zstd,
with both libraries in the same process, interleaved so machine noise hits both alike. Each
figure is the median over ``--runs`` runs of ``--batches`` batches. "read" iterates every record
and touches its key and value; ours also verifies the batch CRC while doing so (aiokafka's
iterator does not), which costs about 1%.

    python benchmarks/bench_records.py [--records 1000] [--batches 20] [--runs 7]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiokafka.record.default_records import (
    DefaultRecordBatch as AioBatch,
)
from aiokafka.record.default_records import (
    DefaultRecordBatchBuilder as AioBuilder,
)

from sdk.records import Compression, RecordBatch, RecordBatchBuilder

TIMESTAMP = 1_700_000_000_000


def make_records(count: int) -> list[tuple[bytes, bytes]]:
    """Keys and values that look like application data (so zstd has something to do)."""
    rng = random.Random(42)
    words = [bytes(rng.choices(b"abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 9))) for _ in range(300)]
    out = []
    for i in range(count):
        value = b" ".join(rng.choice(words) for _ in range(20))[:100].ljust(100, b".")
        out.append((b"key-%08d" % i, value))
    return out


def ours_build(codec: Compression, records: list[tuple[bytes, bytes]]) -> bytes:
    builder = RecordBatchBuilder(codec, batch_size=1 << 30)
    append = builder.append
    for key, value in records:
        append(TIMESTAMP, key, value)
    return builder.build()


def aio_build(codec: Compression, records: list[tuple[bytes, bytes]]) -> bytes:
    builder = AioBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    append = builder.append
    for offset, (key, value) in enumerate(records):
        append(offset, TIMESTAMP, key, value, [])
    return bytes(builder.build())


def ours_read(data: bytes) -> int:
    touched = 0
    for record in RecordBatch(data):
        touched += len(record.key) + len(record.value)
    return touched


def aio_read(data: bytes) -> int:
    touched = 0
    for record in AioBatch(data):
        touched += len(record.key) + len(record.value)
    return touched


def timed(fn: Callable[[], object], batches: int) -> float:
    start = time.perf_counter()
    for _ in range(batches):
        fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1000, help="records per batch")
    parser.add_argument("--batches", type=int, default=20, help="batches per run")
    parser.add_argument("--runs", type=int, default=7, help="runs; the median is reported")
    args = parser.parse_args()
    if args.runs < 5:
        parser.error("use at least 5 runs")

    records = make_records(args.records)
    total = args.records * args.batches
    rows = []
    for codec in (Compression.NONE, Compression.ZSTD):
        ours_data = ours_build(codec, records)
        aio_data = aio_build(codec, records)
        # Same records either way, and each library reads the other's batch.
        expected = sum(len(k) + len(v) for k, v in records)
        assert ours_read(aio_data) == aio_read(ours_data) == expected
        cases = {
            "build": (
                lambda c=codec: ours_build(c, records),
                lambda c=codec: aio_build(c, records),
            ),
            "read": (lambda d=ours_data: ours_read(d), lambda d=ours_data: aio_read(d)),
        }
        for operation, (ours_fn, aio_fn) in cases.items():
            ours_times, aio_times = [], []
            ours_fn(), aio_fn()  # warm up
            for _ in range(args.runs):
                ours_times.append(timed(ours_fn, args.batches))
                aio_times.append(timed(aio_fn, args.batches))
            ours_rate = total / statistics.median(ours_times)
            aio_rate = total / statistics.median(aio_times)
            rows.append((operation, codec.name.lower(), ours_rate, aio_rate))

    print(
        f"{args.records} records/batch, 12-byte keys, 100-byte values, {args.batches} batches/run,"
        f" median of {args.runs} runs (Python {sys.version.split()[0]})"
    )
    header = f"{'operation':<10}{'codec':<7}{'ours rec/s':>14}{'aiokafka rec/s':>16}{'ours/aiokafka':>15}"
    print(header)
    print("-" * len(header))
    for operation, codec_name, ours_rate, aio_rate in rows:
        print(
            f"{operation:<10}{codec_name:<7}{ours_rate:>14,.0f}{aio_rate:>16,.0f}"
            f"{ours_rate / aio_rate:>15.2f}"
        )


if __name__ == "__main__":
    main()
