"""Anomaly soak: the long form of tests/tools/anomaly/test_workload.py.

Runs the anomaly workload (idempotent and transactional producers, group consumers, every fault)
for ``--minutes`` against a reference broker, a 3-node reference cluster, an Apache Kafka node or
a 3-node Kafka cluster it starts, checks the whole history and prints the report. On a cluster the
topic has three replicas and ``min.insync.replicas=2``, and the nemesis hits one node at a time
(on ours also cutting it off from the others and from clients through the cluster's proxy).
Exits 1 when the checker found an anomaly; the history stays in ``--out`` (or the temporary
directory printed) for ``python -m tools.anomaly check``.

    python benchmarks/anomaly_soak.py --minutes 10 --target reference
    python benchmarks/anomaly_soak.py --minutes 10 --target kafka    # needs Java and Maven
    python benchmarks/anomaly_soak.py --minutes 10 --target reference-cluster
    python benchmarks/anomaly_soak.py --minutes 10 --target kafka-cluster
    python benchmarks/anomaly_soak.py --minutes 5 --broker-property transaction.version=1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_broker.testing import BrokerProcess, ClusterProcess  # noqa: E402
from tools.anomaly.__main__ import REFERENCE_BROKER_CONFIG, parse_faults  # noqa: E402
from tools.anomaly.checker import check  # noqa: E402
from tools.anomaly.nemesis import FAULTS, NETWORK_FAULTS, ReferenceBrokerNode, cluster_nodes  # noqa: E402
from tools.anomaly.workload import RunResult, WorkloadConfig, run_workload  # noqa: E402

KAFKA_PROPERTIES = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
    "group.min.session.timeout.ms": 1000,
}


def parse_property(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def parse_range(text: str) -> tuple[float, float]:
    low, sep, high = text.partition(",")
    try:
        bounds = (float(low), float(high if sep else low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected SECONDS or LOW,HIGH seconds, got {text!r}") from None
    if not 0 <= bounds[0] <= bounds[1]:
        raise argparse.ArgumentTypeError(f"expected 0 <= LOW <= HIGH, got {text!r}")
    return bounds


def run_reference(out: Path, config: WorkloadConfig, properties: dict[str, str]) -> RunResult:
    with BrokerProcess(config={**REFERENCE_BROKER_CONFIG, **properties}) as broker:
        return run_workload(broker.bootstrap, [ReferenceBrokerNode(broker)], out, config)


def run_kafka(out: Path, config: WorkloadConfig, properties: dict[str, str]) -> RunResult:
    from tests.apache_kafka import KafkaCluster

    cluster = KafkaCluster(out / "kafka", 1, **{**KAFKA_PROPERTIES, **properties})
    try:
        node = cluster.start().nodes[0]
        return run_workload(node.bootstrap, [node], out / "history", config)
    finally:
        cluster.stop()


def run_reference_cluster(out: Path, config: WorkloadConfig, properties: dict[str, str]) -> RunResult:
    with ClusterProcess(3, {**REFERENCE_BROKER_CONFIG, **properties}, data_dir=out / "cluster") as cluster:
        return run_workload(cluster.bootstrap, cluster_nodes(cluster), out / "history", config)


def run_kafka_cluster(out: Path, config: WorkloadConfig, properties: dict[str, str]) -> RunResult:
    from tests.apache_kafka import KafkaCluster

    cluster = KafkaCluster(out / "kafka", 3, **{**KAFKA_PROPERTIES, **properties})
    try:
        cluster.start()
        return run_workload(cluster.bootstrap, cluster.nodes, out / "history", config)
    finally:
        cluster.stop()


TARGETS = {
    "reference": run_reference,
    "kafka": run_kafka,
    "reference-cluster": run_reference_cluster,
    "kafka-cluster": run_kafka_cluster,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--target", choices=tuple(TARGETS), default="reference")
    parser.add_argument(
        "--faults",
        type=parse_faults,
        help="comma-separated, or none (default: every fault the target takes; partition-node only "
        "on reference-cluster, whose nodes sit behind a proxy)",
    )
    parser.add_argument("--txn-clients", type=int, default=2)
    parser.add_argument("--confluent-txn-clients", type=int, default=1)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument(
        "--broker-property",
        type=parse_property,
        action="append",
        default=[],
        help="KEY=VALUE broker setting, repeatable (e.g. transaction.version=1, log.segment.bytes=1048576)",
    )
    parser.add_argument(
        "--interval", type=parse_range, default=(2.0, 5.0), help="seconds between faults: LOW,HIGH"
    )
    parser.add_argument(
        "--hold",
        type=parse_range,
        default=(0.5, 3.0),
        help="seconds a fault lasts: LOW,HIGH (beyond 5 s, clients' requests time out during pauses)",
    )
    parser.add_argument("--seed", type=int)
    parser.add_argument("--out", type=Path, help="directory for the histories (default: a new temp dir)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="anomaly-soak-"))
    cluster = args.target.endswith("-cluster")
    if args.faults is None:
        args.faults = list(FAULTS) + (list(NETWORK_FAULTS) if args.target == "reference-cluster" else [])
    elif set(args.faults) & set(NETWORK_FAULTS) and args.target != "reference-cluster":
        parser.error(f"{', '.join(NETWORK_FAULTS)}: only --target reference-cluster can cut a node off")
    config = WorkloadConfig(
        duration=args.minutes * 60,
        producers=args.producers,
        txn_clients=args.txn_clients,
        confluent_txn_clients=args.confluent_txn_clients,
        consumers=args.consumers,
        faults=args.faults,
        fault_interval=args.interval,
        fault_hold=args.hold,
        seed=args.seed,
        replication_factor=3 if cluster else 1,
        min_insync_replicas=2 if cluster else None,
    )
    result = TARGETS[args.target](out, config, dict(args.broker_property))
    report = check(result.history)
    print(f"target: {args.target}, {args.minutes:g} min, faults: {', '.join(args.faults) or 'none'}")
    print(f"run: {result.seconds:.0f} s, {result.faults} faults, {result.client_restarts} client kills")
    print(f"crashed clients: {', '.join(result.crashed) or 'none'}")
    print(f"history: {result.history_path}")
    print(report.render(examples=5))
    return 0 if report.valid and not result.crashed else 1


if __name__ == "__main__":
    sys.exit(main())
