"""The cleaner's key map on its hot path, in this process: the cost of a put and of a get per key,
and of a whole cleaning pass per record, on a log written to a temporary directory.

    python benchmarks/bench_cleaner_key_map.py [--records 100000] [--distinct 0.1] [--runs 3]

A pass maps every keyed record of the dirty range (one put each) and then looks up every record it
rewrites (one get each), so the map's share of a pass is about a put plus a get per record. Run it
with another checkout first on ``PYTHONPATH`` to compare two versions of the map: it uses only
what both versions offer (``KeyOffsetMap`` made with or without a size, ``clean_log``).

Times are this process's CPU time (``time.process_time``), less disturbed than wall time by other
processes on a busy machine; a pass's waits for the disk are left out.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from reference_broker.log import LogConfig, PartitionLog
from reference_broker.log.cleaner import clean_log, cleanable
from reference_broker.log.offset_map import KeyOffsetMap
from sdk.records import RecordBatchBuilder

RECORDS_PER_BATCH = 64
VALUE = b"v" * 100
DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024


def _keys(records: int, distinct: float) -> list[bytes]:
    count = max(1, int(records * distinct))
    return [b"key-%08d" % (i % count) for i in range(records)]


def map_ns(keys: list[bytes]) -> tuple[float, float]:
    """CPU nanoseconds per put and per get of ``keys`` on a map made as the cleaner makes it."""
    make: Any = KeyOffsetMap
    try:
        offsets = make(DEDUPE_BUFFER_SIZE, max_keys=len(keys))  # the cleaner's default size
    except TypeError:  # a version whose map takes no size
        offsets = make()
    start = time.process_time()
    for offset, key in enumerate(keys):
        offsets.put(key, offset)
    put = time.process_time() - start
    start = time.process_time()
    for key in keys:
        offsets.get(key)
    get = time.process_time() - start
    return put / len(keys) * 1e9, get / len(keys) * 1e9


def pass_us(keys: list[bytes]) -> float:
    """CPU microseconds per record of one cleaning pass over a log of ``keys`` (one record each)."""
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=4 * 1024 * 1024)
    with tempfile.TemporaryDirectory() as scratch:
        plog = PartitionLog.open(Path(scratch) / "bench-0", config, now_ms=1_000)
        try:
            for first in range(0, len(keys), RECORDS_PER_BATCH):
                builder = RecordBatchBuilder()
                for key in keys[first:first + RECORDS_PER_BATCH]:
                    builder.append(1_000, key, VALUE)
                plog.append(builder.build(), now_ms=1_000)
            plog.roll(now_ms=1_000)
            to_clean = cleanable(plog, None, 2_000)
            start = time.process_time()
            clean_log(plog, to_clean, 2_000)
            return (time.process_time() - start) / len(keys) * 1e6
        finally:
            plog.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--distinct", type=float, default=0.1, help="share of the records with a new key")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.records < 1 or not 0 < args.distinct <= 1 or args.runs < 1:
        parser.error("--records and --runs must be at least 1, --distinct in (0, 1]")
    keys = _keys(args.records, args.distinct)
    maps = [map_ns(keys) for _ in range(args.runs)]
    passes = [pass_us(keys) for _ in range(args.runs)]
    print(f"{args.records:,} records, {len(set(keys)):,} distinct keys; median of {args.runs}")
    print(f"map put  {statistics.median(p for p, _ in maps):8.0f} ns/key")
    print(f"map get  {statistics.median(g for _, g in maps):8.0f} ns/key")
    print(f"pass     {statistics.median(passes):8.2f} us/record")


if __name__ == "__main__":
    main()
