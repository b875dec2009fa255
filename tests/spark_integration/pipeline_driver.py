"""A Spark driver process running ``run_exactly_once`` for the crash tests, on a local-cluster
with speculative execution on (``cluster.py``, event log under ``EVENTS``).

    python pipeline_driver.py BOOTSTRAP SOURCE SINK GROUP WORKDIR EVENTS [--max-records N]
        [--kill-at KEY] [--slow-at KEY] [--fail-before-commit PARTITION]

The transform appends ``!`` to every value. Its test hooks act on the record with the given key:
It calls ``run_exactly_once`` one round at a time (printing a line after each) until a round
consumes nothing. ``--kill-at`` SIGKILLs this driver's process group (the driver JVM, the executors and their
Python workers) in the middle of a round, with the task's transaction open; ``--slow-at`` stalls
the first attempt of its task for 20 s, so Spark launches a speculative copy. The output is the
same whichever attempt produces it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from spark_integration import run_exactly_once
from tests.spark_integration.cluster import speculative_session

STALL_S = 20.0


def bang_with_hooks(kill_at: bytes | None, slow_at: bytes | None, process_group: int):
    """The pipeline's transform, ``value + b"!"``, with the kill and stall hooks."""

    def bang(key: bytes | None, value: bytes | None) -> list[tuple[bytes | None, bytes | None]]:
        if kill_at is not None and key == kill_at:
            os.killpg(process_group, signal.SIGKILL)
        if slow_at is not None and key == slow_at:
            from pyspark import TaskContext

            context = TaskContext.get()
            if context is not None and context.attemptNumber() == 0:
                time.sleep(STALL_S)
        return [(key, (value or b"") + b"!")]

    return bang


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "source", "sink", "group"):
        parser.add_argument(name)
    parser.add_argument("workdir", type=Path)
    parser.add_argument("events", type=Path)
    parser.add_argument("--max-records", type=int)
    parser.add_argument("--kill-at")
    parser.add_argument("--slow-at")
    parser.add_argument("--fail-before-commit", type=int)
    args = parser.parse_args()
    spark = speculative_session("pipeline_driver", args.workdir, args.events)
    transform = bang_with_hooks(args.kill_at.encode() if args.kill_at else None,
                                args.slow_at.encode() if args.slow_at else None, os.getpgid(0))
    consumed = 0
    while True:  # one round per call, so the test sees each round end ("round N: ...")
        result = run_exactly_once(
            spark, bootstrap_servers=args.bootstrap, input_topic=args.source, output_topic=args.sink,
            group_id=args.group, transform=transform, max_records=args.max_records, max_rounds=1,
            producer_config={"transaction_timeout_ms": 10000},
            fail_before_commit=None if args.fail_before_commit is None else (args.fail_before_commit, False),
        )
        if not result.consumed:  # a fresh call plans every partition; its tasks found nothing left
            break
        consumed += result.consumed
        print(f"round: consumed {result.consumed}, in all {consumed}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
