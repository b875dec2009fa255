"""``python -m reference_broker cluster --nodes 3 --data-dir D``: a local cluster of node processes.

Each node is a separate ``python -m reference_broker`` process in combined mode (broker and
controller), node N on its own loopback address ``127.0.1.N`` with a client listener and a
controller listener, all sharing one cluster id (kept in the nodes' ``meta.properties``, so a
second run on the same data dir is the same cluster). The command waits until every broker is
registered and unfenced (every node's Metadata lists them all), prints the bootstrap list on one
line (:data:`BOOTSTRAP_PREFIX`), and stops every node by its PID on SIGINT or SIGTERM. A node that
fails to start makes the command stop the others and exit with status 1, after printing the tail of
that node's log.

:func:`node_config` is the one place a node's settings are made, for this command and for
:class:`reference_broker.testing.ClusterProcess` (which may put a proxy between the advertised
and the real addresses).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BOOTSTRAP_PREFIX = "reference_broker cluster bootstrap: "
HOST_PREFIX = "127.0.1."
#: Cluster settings of a local cluster unless the user says otherwise: heartbeats and the
#: session timeout short enough that a dead node is fenced (and its leaderships moved) in seconds,
#: as test clusters are configured in Kafka's own integration tests.
LOCAL_CLUSTER_DEFAULTS: Mapping[str, Any] = {
    "broker.heartbeat.interval.ms": 500,
    "broker.session.timeout.ms": 3000,
}


def node_host(node_id: int) -> str:
    """Node ``node_id``'s own loopback address (never 127.0.0.1, where clients connect from)."""
    if not 1 <= node_id <= 254:
        raise ValueError(f"node id {node_id} must be between 1 and 254 on a loopback cluster")
    return f"{HOST_PREFIX}{node_id}"


def voters_setting(controller_ports: Mapping[int, int]) -> str:
    """``controller.quorum.voters`` for voters at ``{node id: advertised controller port}``."""
    return ",".join(f"{n}@{node_host(n)}:{port}" for n, port in sorted(controller_ports.items()))


def bootstrap_servers_setting(controller_ports: Mapping[int, int]) -> str:
    """``controller.quorum.bootstrap.servers`` for controllers at ``{node id: advertised port}``."""
    return ",".join(f"{node_host(n)}:{port}" for n, port in sorted(controller_ports.items()))


#: the quorum modes of a local cluster: static voters (kraft.version 0, the default), or a
#: dynamic quorum (KIP-853) with node 1 formatted ``--standalone`` and the others observers to be
#: added, or with every node an initial controller (``--initial-controllers``)
QUORUM_MODES = ("static", "standalone", "initial-controllers")


def node_config(
    node_id: int,
    *,
    cluster_id: str,
    voters: str,
    client_port: int,
    controller_port: int,
    advertised_client_port: int | None = None,
    advertised_controller_port: int | None = None,
    extra: Mapping[str, Any] | None = None,
    extra_listeners: Mapping[str, tuple[str, int, int]] | None = None,
    bootstrap_servers: str | None = None,
) -> dict[str, Any]:
    """The settings of one combined-mode node. ``advertised_*`` differ from the bound ports when a
    proxy listens on the advertised ones; ``extra`` (Kafka property names) wins over the rest.
    ``extra_listeners`` (name -> (security protocol, bound port, advertised port)) are more
    listeners of this node, e.g. a TLS inter-broker listener named by ``inter.broker.listener.name``
    in ``extra``. The default inter-broker listener, PLAINTEXT, is only named when ``extra`` does not
    choose it by ``security.inter.broker.protocol`` (Kafka refuses both set). With
    ``bootstrap_servers`` the node is in a dynamic quorum (``controller.quorum.bootstrap.servers``,
    no ``controller.quorum.voters``)."""
    host = node_host(node_id)
    advertised_client = advertised_client_port or client_port
    advertised_controller = advertised_controller_port or controller_port
    config: dict[str, Any] = {
        **LOCAL_CLUSTER_DEFAULTS,
        "node.id": node_id,
        "process.roles": "broker,controller",
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://{host}:{client_port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{advertised_client},"
        f"CONTROLLER://{host}:{advertised_controller}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "cluster.id": cluster_id,
    }
    for name, (protocol, bound, advertised) in (extra_listeners or {}).items():
        config["listeners"] += f",{name}://{host}:{bound}"
        config["advertised.listeners"] += f",{name}://{host}:{advertised or bound}"
        config["listener.security.protocol.map"] += f",{name}:{protocol}"
    if "security.inter.broker.protocol" in (extra or {}):
        del config["inter.broker.listener.name"]
    if bootstrap_servers is not None:
        del config["controller.quorum.voters"]
        config["controller.quorum.bootstrap.servers"] = bootstrap_servers
    config.update(extra or {})
    return config


def stored_cluster_id(data_dir: Path) -> str | None:
    """The cluster id a previous run kept in a node's ``meta.properties`` under ``data_dir``."""
    for meta in sorted(data_dir.glob("node-*/meta.properties")):
        for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "cluster.id" and value.strip():
                return value.strip()
    return None


def parse_args(argv: list[str]) -> argparse.Namespace:
    from reference_broker.__main__ import _key_value

    parser = argparse.ArgumentParser(
        prog="python -m reference_broker cluster",
        description="Run a local cluster of combined-mode nodes (node N on 127.0.1.N) until "
        "SIGTERM or SIGINT, and print its bootstrap list once every broker is registered.",
    )
    parser.add_argument("--nodes", type=int, default=3, help="how many nodes (default 3)")
    parser.add_argument("--data-dir", required=True, type=Path, help="node N keeps its data in DIR/node-N")
    parser.add_argument(
        "--base-port",
        type=int,
        default=None,
        help="node N listens for clients on BASE+N-1 and for controllers on BASE+100+N-1 "
        "(default: free ports)",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        type=_key_value,
        metavar="KEY=VALUE",
        help="one setting for every node, Kafka's names (repeatable)",
    )
    parser.add_argument(
        "--quorum",
        choices=QUORUM_MODES,
        default="static",
        help="static controller.quorum.voters (default); standalone: a dynamic quorum (KIP-853) "
        "with node 1 its only voter and the others observers to add with kafka-metadata-quorum "
        "add-controller; initial-controllers: a dynamic quorum of every node",
    )
    parser.add_argument("--start-timeout", type=float, default=60.0, help="seconds to wait for the nodes")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        type=str.upper,
        help="the nodes' log level (their logs are DIR/node-N.log)",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.nodes <= 254:
        parser.error(f"--nodes {args.nodes}: between 1 and 254")
    if args.base_port is not None and not 1024 <= args.base_port <= 65535 - 100 - args.nodes:
        parser.error(f"--base-port {args.base_port}: between 1024 and {65535 - 100 - args.nodes}")
    return args


def main(argv: list[str]) -> int:
    from reference_broker.testing import BrokerStartError, ClusterProcess, ClusterStartError

    args = parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    cluster = ClusterProcess(
        args.nodes,
        config=dict(args.override),
        data_dir=args.data_dir,
        proxy=False,
        base_port=args.base_port,
        log_level=args.log_level,
        start_timeout=args.start_timeout,
        quorum=args.quorum,
    )
    try:
        try:
            cluster.start(interrupted=stop)
        except (BrokerStartError, ClusterStartError) as exc:
            print(f"reference_broker cluster: cannot start: {exc}", file=sys.stderr, flush=True)
            return 1
        if stop.is_set():
            return 0
        print(f"{BOOTSTRAP_PREFIX}{cluster.bootstrap}", flush=True)
        for node in cluster.nodes:
            print(f"  node {node.node_id}: {node.bootstrap} pid {node.pid} log {node.log_path}", flush=True)
        while not stop.wait(0.5):
            failed = [n for n in cluster.nodes if not n.running]
            if failed:
                node = failed[0]
                print(f"reference_broker cluster: node {node.node_id} exited:\n{node.log_tail()}",
                      file=sys.stderr, flush=True)
                return 1
        return 0
    finally:
        cluster.close()
