"""Exactly-once copy soak: the long form of tests/sdk/producer/test_transactions_eos.py.

Seeds ``--messages`` numbered records, copies them with ``--copier`` processes (our SDK or
confluent-kafka: read_committed consumer + transactional producer + offsets in the transaction)
while killing the copier and the broker with SIGKILL ``--bounces`` times each, and prints the
figures: duplicates, missing and order violations in the output, and whether a concurrent
read_committed reader ever saw anything but a prefix of the output. Exits 1 unless exact.

    python benchmarks/eos_soak.py --messages 100000 --bounces 5 --copier sdk
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from eos_copy import BROKER_CONFIG, COPIERS, run_soak

from reference_broker.testing import BrokerProcess


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--bounces", type=int, default=5, help="copier kills, and as many broker kills")
    parser.add_argument("--copier", choices=COPIERS, default="sdk")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds the copy may take")
    args = parser.parse_args()
    config = {**BROKER_CONFIG, "num.partitions": args.partitions}
    with tempfile.TemporaryDirectory(prefix="eos-soak-") as scratch, BrokerProcess(config=config) as broker:
        result = run_soak(
            broker,
            messages=args.messages,
            partitions=args.partitions,
            bounces=args.bounces,
            copier=args.copier,
            log_dir=Path(scratch),
            timeout_s=args.timeout,
        )
    print(f"copier: {args.copier}, {args.partitions} partitions")
    print(f"messages: {result.messages}")
    print(f"copier kills: {result.copier_kills}")
    print(f"broker kills: {result.broker_kills}")
    print(f"stall kills: {result.stall_kills}")
    print(f"copier starts: {result.copier_starts}")
    print(f"bounced at: {', '.join(map(str, result.bounced_at))}")
    print(f"duplicates: {result.duplicates}")
    print(f"missing: {result.missing}")
    print(f"order violations: {result.order_violations}")
    print(f"reader violations: {result.reader_violations} (reader saw {result.reader_saw})")
    print(f"seconds: {result.seconds:.1f}")
    print(f"msgs/s: {result.messages / result.seconds:,.0f}")
    print("exact" if result.exact else "NOT EXACT")
    return 0 if result.exact else 1


if __name__ == "__main__":
    sys.exit(main())
