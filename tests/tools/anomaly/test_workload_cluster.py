"""The anomaly workload on a 3-node reference cluster: idempotent acks=all producers,
transactional copiers (SDK and confluent-kafka) and group consumers write and read a topic with
three replicas and ``min.insync.replicas=2`` while the nemesis kills (SIGKILL, restart on the same
data), pauses (SIGSTOP) and cuts off (every link to the other nodes and to clients reset) one node
at a time, whichever it leads: partitions, coordinators or the quorum. The checker over the whole
history must find no lost acknowledged write, no duplicate, no aborted or uncommitted read and no
reordering. A file of its own so it runs on a worker beside the single-node workloads; the long
form is ``benchmarks/anomaly_soak.py --target reference-cluster``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reference_broker.testing import ClusterProcess
from tests.tools.anomaly.test_workload import run_and_check
from tools.anomaly.__main__ import REFERENCE_BROKER_CONFIG
from tools.anomaly.nemesis import FAULTS, NETWORK_FAULTS, cluster_nodes

pytestmark = pytest.mark.slow


def test_reference_cluster_under_node_faults_has_no_anomalies(tmp_path: Path) -> None:
    with ClusterProcess(3, REFERENCE_BROKER_CONFIG, data_dir=tmp_path / "cluster") as cluster:
        run_and_check(
            cluster.bootstrap,
            cluster_nodes(cluster),
            tmp_path / "run",
            seconds=45,
            faults=FAULTS + NETWORK_FAULTS,
            replication_factor=3,
            min_insync_replicas=2,
        )
