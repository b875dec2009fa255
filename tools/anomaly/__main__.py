"""Command line: run the workload and check its history, or check a history file.

    python -m tools.anomaly run --seconds 60                 # a reference broker it starts
    python -m tools.anomaly run --bootstrap host:9092 --faults kill-client,pause-client,rebalance
    python -m tools.anomaly check runs/anomaly-x/history.jsonl

``run`` writes ``history.jsonl`` (and each process's own file and log) to ``--out`` (a new
temporary directory by default), prints the report and exits 1 when it found anomalies. Against
``--bootstrap`` the broker is not ours to kill, so broker faults are not offered there.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tools.anomaly.checker import check
from tools.anomaly.history import load_history
from tools.anomaly.nemesis import FAULTS, NETWORK_FAULTS, Node, ReferenceBrokerNode
from tools.anomaly.workload import WorkloadConfig, run_workload

#: The reference broker as the workload runs it: internal topics kept small, open transactions of
#: killed clients aborted promptly.
REFERENCE_BROKER_CONFIG = {
    "offsets.topic.num.partitions": 2,
    "transaction.state.log.num.partitions": 2,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
}
BROKER_FAULTS = ("kill-broker", "pause-broker")


def parse_faults(text: str) -> list[str]:
    faults = [fault for fault in text.split(",") if fault] if text != "none" else []
    unknown = set(faults) - set(FAULTS) - set(NETWORK_FAULTS)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS + NETWORK_FAULTS)}, none"
        )
    return faults


def run(args: argparse.Namespace) -> int:
    out = args.out or Path(tempfile.mkdtemp(prefix="anomaly-"))
    config = WorkloadConfig(
        duration=args.seconds,
        producers=args.producers,
        confluent_producers=args.confluent_producers,
        txn_clients=args.txn_clients,
        confluent_txn_clients=args.confluent_txn_clients,
        consumers=args.consumers,
        faults=args.faults,
        seed=args.seed,
    )
    if args.bootstrap:
        refused = sorted(set(args.faults) & set(BROKER_FAULTS))
        if refused:
            raise SystemExit(f"--bootstrap: broker faults {refused} need a broker this tool started")
        result = run_workload(args.bootstrap, [], out, config)
    else:
        from reference_broker.testing import BrokerProcess

        with BrokerProcess(config=REFERENCE_BROKER_CONFIG) as broker:
            nodes: list[Node] = [ReferenceBrokerNode(broker)]
            result = run_workload(broker.bootstrap, nodes, out, config)
    report = check(result.history)
    print(f"history: {result.history_path}")
    print(
        f"run: {result.seconds:.1f} s, {result.faults} faults, {result.client_restarts} client kills, "
        f"crashed clients: {', '.join(result.crashed) or 'none'}"
    )
    print(report.render(args.examples))
    return 0 if report.valid else 1


def check_file(args: argparse.Namespace) -> int:
    report = check(load_history(args.history))
    print(report.render(args.examples))
    return 0 if report.valid else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.anomaly", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="run the workload, write its history, check it")
    run_parser.add_argument("--bootstrap", help="an existing broker (default: start a reference broker)")
    run_parser.add_argument("--seconds", type=float, default=60.0)
    run_parser.add_argument(
        "--faults", type=parse_faults, default=list(FAULTS), help="comma-separated, or none"
    )
    run_parser.add_argument("--producers", type=int, default=2)
    run_parser.add_argument("--confluent-producers", type=int, default=1)
    run_parser.add_argument("--txn-clients", type=int, default=2)
    run_parser.add_argument("--confluent-txn-clients", type=int, default=1)
    run_parser.add_argument("--consumers", type=int, default=2)
    run_parser.add_argument("--seed", type=int)
    run_parser.add_argument("--out", type=Path, help="directory for the histories (default: a new temp dir)")
    run_parser.add_argument("--examples", type=int, default=3, help="examples shown per anomaly kind")
    run_parser.set_defaults(handler=run)
    check_parser = commands.add_parser("check", help="check a history file (JSON lines)")
    check_parser.add_argument("history", type=Path)
    check_parser.add_argument("--examples", type=int, default=3)
    check_parser.set_defaults(handler=check_file)
    args = parser.parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
