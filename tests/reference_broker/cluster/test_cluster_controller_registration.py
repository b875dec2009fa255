"""Controllers register themselves (KIP-919), on our three-node cluster and on Apache Kafka
4.1.1's, seen from outside as a tester would: DescribeCluster with the controller endpoint type
(2) sent to a controller listener lists the registered controllers with their controller
listeners and names the active one; the same request to a broker listener, or the broker type to
a controller listener, is MISMATCHED_ENDPOINT_TYPE with Kafka's message; Kafka's own tools
bootstrapped to a controller (``kafka-cluster cluster-id``, ``kafka-metadata-quorum describe
--status``, ``kafka-features describe``) work, since they find the controllers through that
listing; a restarted node registers again with a new incarnation (its log says so) and the
listing stays whole. With controller-only nodes and a broker-only node, the controllers list only
themselves and the broker only itself."""

from __future__ import annotations

import asyncio
import functools
import re
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reference_broker.network.peer import PeerConnection, PeerConnectionError
from reference_broker.testing import BrokerProcess, ClusterFactory, ClusterProcess
from reference_broker.testing import wait_until as until
from sdk.protocol.messages import ControllerRegistrationRequest, DescribeClusterRequest
from tests.apache_kafka import KafkaCluster, kafka_tool, require_apache_kafka, unavailable_reason

MISMATCHED_ENDPOINT_TYPE = 114
INVALID_REQUEST = 42
NOT_CONTROLLER = 41
OPERATIONS_OMITTED = -(2**31)
#: CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE:
#: Kafka's AclEntry.supportedOperations(CLUSTER) as a bit field (8096)
ALL_CLUSTER_OPERATIONS = sum(1 << code for code in (5, 7, 8, 9, 10, 11, 12))
BROKER_TYPE, CONTROLLER_TYPE = 1, 2
TO_BROKER = "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type {}"
TO_CONTROLLER = "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of type {}"


@dataclass
class Nodes:
    """A running three-node cluster: node id -> (host, broker port, controller port)."""

    kind: str
    addresses: Callable[[], dict[int, tuple[str, int, int]]]
    restart: Callable[[int], None]
    #: node id -> every incarnation id its log says it registered, oldest first
    incarnations: Callable[[int], list[str]]


def _reference(cluster: ClusterProcess) -> Nodes:
    def addresses() -> dict[int, tuple[str, int, int]]:
        return {n: (cluster.node(n).host, cluster.node(n).port, cluster.node(n).controller_port)
                for n in (1, 2, 3)}

    def incarnations(node_id: int) -> list[str]:
        return re.findall(r"controller \d+: our registration \(incarnation (\S+)\) is in the metadata log",
                          cluster.node(node_id).process.stderr())

    def restart(node_id: int) -> None:
        cluster.restart(node_id)

    return Nodes("reference", addresses, restart, incarnations)


def _kafka(cluster: KafkaCluster) -> Nodes:
    def addresses() -> dict[int, tuple[str, int, int]]:
        return {n.node_id: ("127.0.0.1", n.port, n.controller_port) for n in cluster.nodes}

    def incarnations(node_id: int) -> list[str]:
        node = cluster.node(node_id)
        text = "".join(p.read_text(errors="replace") for p in (node.data_dir / "stdout.log", node.log_path)
                       if p.exists())
        return re.findall(r"\[ControllerRegistrationManager id=\d+ incarnation=(\S+)\] "
                          r"Our registration has been persisted to the metadata log", text)

    def restart(node_id: int) -> None:
        cluster.node(node_id).restart()

    return Nodes("kafka", addresses, restart, incarnations)


@pytest.fixture(params=["reference", pytest.param("kafka", marks=pytest.mark.apache_kafka)])
def nodes(
    request: pytest.FixtureRequest, reference_cluster: ClusterFactory, tmp_path: Path
) -> Iterator[Nodes]:
    if request.param == "reference":
        yield _reference(reference_cluster(3))
        return
    require_apache_kafka()
    kafka = KafkaCluster(tmp_path / "kafka", 3, client_compiler=True)
    try:
        kafka.start()
        yield _kafka(kafka)
    finally:
        kafka.kill()


def describe_cluster(host: str, port: int, endpoint_type: int, version: int = 1,
                     with_operations: bool = False) -> Any:
    """One DescribeCluster (v1: the first with ``endpoint_type``; v0 is always of the broker
    type), or None when not answered."""

    async def ask() -> Any:
        conn = PeerConnection(host, port, client_id="controller-registration-test",
                              connect_timeout_s=2, request_timeout_s=5)
        try:
            request = DescribeClusterRequest(endpoint_type=endpoint_type,
                                             include_cluster_authorized_operations=with_operations)
            return await conn.send(request, version=version)
        finally:
            await conn.close()

    try:
        return asyncio.run(ask())
    except (PeerConnectionError, OSError):
        return None


def listing(nodes: Nodes) -> Any:
    """(controller id, [(id, host, port, rack)]) when every node's controller listener lists the
    three controllers at their controller listeners and they agree on the active one."""
    addresses = nodes.addresses()
    expected = [(n, host, ctl, None) for n, (host, _, ctl) in sorted(addresses.items())]
    views = set()
    for host, _, ctl in addresses.values():
        answer = describe_cluster(host, ctl, CONTROLLER_TYPE)
        if answer is None or answer.error_code != 0:
            return None
        described = [(b.broker_id, b.host, b.port, b.rack) for b in answer.brokers]
        if described != expected or answer.endpoint_type != CONTROLLER_TYPE:
            return None
        views.add(answer.controller_id)
    if len(views) != 1 or views == {-1}:
        return None
    return views.pop(), expected


def test_describe_cluster_on_a_controller_listener_lists_the_registered_controllers(nodes: Nodes) -> None:
    active, _ = until(lambda: listing(nodes), "every controller lists the three controllers", 60)
    assert active in (1, 2, 3)
    host, broker_port, controller_port = nodes.addresses()[2]
    answer = describe_cluster(host, controller_port, CONTROLLER_TYPE)
    assert answer.error_message is None
    assert answer.cluster_id  # the cluster's id, as on the broker listener
    assert answer.cluster_id == describe_cluster(host, broker_port, BROKER_TYPE).cluster_id
    # the controller type to a broker listener, and the broker type to a controller listener
    to_broker = describe_cluster(host, broker_port, CONTROLLER_TYPE)
    assert (to_broker.error_code, to_broker.error_message, to_broker.brokers) == (
        MISMATCHED_ENDPOINT_TYPE, TO_BROKER.format("CONTROLLER"), [])
    to_controller = describe_cluster(host, controller_port, BROKER_TYPE)
    assert (to_controller.error_code, to_controller.error_message, to_controller.brokers) == (
        MISMATCHED_ENDPOINT_TYPE, TO_CONTROLLER.format("BROKER"), [])
    # v0 has no endpoint type: the broker type, which a controller refuses as an invalid request
    old = describe_cluster(host, controller_port, BROKER_TYPE, version=0)
    assert (old.error_code, old.error_message, old.brokers) == (
        INVALID_REQUEST, TO_CONTROLLER.format("BROKER"), [])
    # the cluster operations, when asked: every one without an authorizer, on either listener
    assert answer.cluster_authorized_operations == OPERATIONS_OMITTED
    for port, endpoint_type in ((controller_port, CONTROLLER_TYPE), (broker_port, BROKER_TYPE)):
        asked = describe_cluster(host, port, endpoint_type, with_operations=True)
        assert asked.cluster_authorized_operations == ALL_CLUSTER_OPERATIONS, (port, asked)
    # a broker listener still describes the brokers at their broker listeners
    brokers = describe_cluster(host, broker_port, BROKER_TYPE)
    assert sorted((b.broker_id, b.port) for b in brokers.brokers) == [
        (n, port) for n, (_, port, _) in sorted(nodes.addresses().items())]


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_kafka_tools_bootstrapped_to_a_controller_find_the_registered_controllers(nodes: Nodes) -> None:
    active, _ = until(lambda: listing(nodes), "every controller lists the three controllers", 60)
    host, broker_port, controller_port = nodes.addresses()[3]
    controller = f"{host}:{controller_port}"
    cluster_id = describe_cluster(host, broker_port, BROKER_TYPE).cluster_id
    shown = kafka_tool("org.apache.kafka.tools.ClusterTool", "cluster-id",
                       "--bootstrap-controller", controller)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"Cluster ID: {cluster_id}"
    status = kafka_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-controller", controller,
                        "describe", "--status")
    assert status.returncode == 0, status.stderr
    assert f"ClusterId:              {cluster_id}\n" in status.stdout
    assert f"LeaderId:               {active}\n" in status.stdout
    features = kafka_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-controller", controller,
                          "describe")
    assert features.returncode == 0, features.stderr
    assert "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.1-IV1" in (
        features.stdout), features.stdout


def test_a_restarted_node_registers_again_as_a_new_incarnation(nodes: Nodes) -> None:
    until(lambda: listing(nodes), "every controller lists the three controllers", 60)
    before = until(lambda: nodes.incarnations(2), "node 2's log shows its registration")
    nodes.restart(2)
    after = until(lambda: nodes.incarnations(2)[len(before):],
                  "node 2's log shows its registration after the restart", 60)
    assert after[-1] not in before
    _, expected = until(lambda: listing(nodes), "every controller lists the three controllers again", 60)
    assert [n for n, *_ in expected] == [1, 2, 3]


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def separate_controllers() -> Iterator[tuple[dict[int, tuple[str, int]], tuple[str, int]]]:
    """Three controller-only nodes (``process.roles=controller``, no broker parts, so their
    registration has a channel of its own) and broker-only node 4: ({id: controller address},
    the broker's address)."""
    hosts = {n: f"127.0.1.{n}" for n in (1, 2, 3, 4)}
    controllers = {n: (hosts[n], _free_port(hosts[n])) for n in (1, 2, 3)}
    broker = (hosts[4], _free_port(hosts[4]))
    common = {
        "controller.quorum.voters": ",".join(f"{n}@{h}:{p}" for n, (h, p) in controllers.items()),
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "cluster.id": "cDVJ2f7NQWm0mzWq2i8Rtw",
    }
    processes = [BrokerProcess(config={**common, "node.id": n, "process.roles": "controller",
                                       "listeners": f"CONTROLLER://{h}:{p}"}, host=h, port=p)
                 for n, (h, p) in controllers.items()]
    processes.append(BrokerProcess(config={**common, "node.id": 4, "process.roles": "broker",
                                           "listeners": f"PLAINTEXT://{broker[0]}:{broker[1]}",
                                           "inter.broker.listener.name": "PLAINTEXT"},
                                   host=broker[0], port=broker[1]))
    try:
        for process in processes:
            process.launch()
        for process in processes:
            process.wait_listening()
        yield controllers, broker
    finally:
        for process in processes:
            process.stop()


def test_controller_only_nodes_register_and_a_broker_only_node_is_no_controller(
    separate_controllers: tuple[dict[int, tuple[str, int]], tuple[str, int]],
) -> None:
    controllers, broker = separate_controllers
    expected = [(n, h, p) for n, (h, p) in sorted(controllers.items())]

    def listed(host: str, port: int) -> Any:
        answer = describe_cluster(host, port, CONTROLLER_TYPE)
        if answer is None or [(b.broker_id, b.host, b.port) for b in answer.brokers] != expected:
            return None
        return answer

    for host, port in controllers.values():
        answer = until(functools.partial(listed, host, port), f"{host}:{port} lists the three controllers")
        assert answer.controller_id in controllers
    def described_broker() -> Any:
        answer = describe_cluster(*broker, BROKER_TYPE)
        return answer if answer is not None and answer.brokers else None

    brokers = until(described_broker, "the broker describes itself")
    assert [(b.broker_id, b.host, b.port) for b in brokers.brokers] == [(4, *broker)]


def controller_registration(host: str, port: int, request: ControllerRegistrationRequest) -> Any:
    """One ControllerRegistration (v0, its only version) sent as a tester, not a node."""

    async def ask() -> Any:
        conn = PeerConnection(host, port, client_id="controller-registration-test",
                              connect_timeout_s=2, request_timeout_s=10)
        try:
            return await conn.send(request, version=0)
        finally:
            await conn.close()

    return asyncio.run(ask())


def test_a_registration_of_another_incarnation_makes_the_controller_register_again(nodes: Nodes) -> None:
    """Somebody else's ControllerRegistration under node 2's id (another incarnation, another
    address) is written as it comes, and node 2, seeing that its registration is no longer its
    own, sends its own again: the listing is right again with node 2's incarnation unchanged.
    A controller that is not the active one answers NOT_CONTROLLER with Kafka's message."""
    active, expected = until(lambda: listing(nodes), "every controller lists the three controllers", 60)
    before = until(lambda: nodes.incarnations(2), "node 2's log shows its registration")
    addresses = nodes.addresses()
    impostor = ControllerRegistrationRequest(
        controller_id=2,
        incarnation_id=uuid.uuid4(),
        listeners=[ControllerRegistrationRequest.Listener(name="CONTROLLER", host="127.0.0.9", port=1,
                                                          security_protocol=0)],
        features=[ControllerRegistrationRequest.Feature(name="metadata.version", min_supported_version=7,
                                                        max_supported_version=27)],
    )
    inactive = next(n for n in sorted(addresses) if n != active)
    refused = controller_registration(addresses[inactive][0], addresses[inactive][2], impostor)
    assert (refused.error_code, refused.error_message) == (
        NOT_CONTROLLER, "This is not the correct controller for this cluster.")
    accepted = controller_registration(addresses[active][0], addresses[active][2], impostor)
    assert (accepted.error_code, accepted.error_message) == (0, "")  # Kafka: the default, not null
    until(lambda: listing(nodes) and any(
        nodes.incarnations(2)[len(before):]), "node 2 registers its own incarnation again", 60)
    assert nodes.incarnations(2)[-1] == before[-1]
    assert until(lambda: listing(nodes), "the listing is right again")[1] == expected
