"""A broker's auto-creation of a topic a client's Metadata names, on a three-node cluster, as
Kafka's ``DefaultAutoTopicCreationManager`` does it: the CreateTopics reaches the active controller
in an Envelope naming the client, so the controller authorizes CREATE for the client (not for the
broker, a super user there); one creation per topic name is in flight at a time.

The cluster is ``test_cluster_acls``'s (StandardAuthorizer, no access without an ACL, User:alice
on a SASL listener), with auto-creation on. To see the controller's own check, one broker that is
not the active controller counts User:alice among its super users (``super.users`` is each
node's own setting), so that broker's check lets her auto-creation through and only the
controller can refuse it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from reference_broker.network.peer import PeerConnection
from reference_broker.testing import ClusterProcess, wait_until
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import CreateAclsRequest, MetadataRequest
from tests.reference_broker.cluster.test_cluster_acls import (
    ALICE_PASSWORD,
    ALLOW,
    CONFIG,
    DEADLINE_S,
    LITERAL,
    NODES,
    TOPIC,
    active_controller,
    admin_request,
    as_user,
    sasl_address,
)
from tests.reference_broker.wire import WireClient

pytestmark = [pytest.mark.interop, pytest.mark.slow]

CREATE = 5  # Kafka's AclOperation code
#: concurrent Metadata requests naming one new topic
BURST = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    data = tmp_path_factory.mktemp("auto-create-cluster") / "data"
    config = {**CONFIG, "auto.create.topics.enable": True, "num.partitions": 1}
    with ClusterProcess(NODES, config, extra_listeners={"SASL": "SASL_PLAINTEXT"}, data_dir=data) as running:
        yield running


def metadata(topic: str, *, create: bool) -> MetadataRequest:
    return MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                           allow_auto_topic_creation=create)


def exists(cluster: ClusterProcess, node_id: int, topic: str) -> bool:
    answer = admin_request(cluster, node_id, metadata(topic, create=False), 12)
    return int(answer.topics[0].error_code) == E.NONE


def alice_metadata(cluster: ClusterProcess, node_id: int, topic: str) -> int:
    address = sasl_address(cluster, node_id)
    answer = as_user(address, "alice", ALICE_PASSWORD, metadata(topic, create=True), 12)
    return int(answer.topics[0].error_code)


def test_the_controller_authorizes_an_auto_creation_as_the_client(cluster: ClusterProcess) -> None:
    leader = active_controller(cluster)
    broker = next(n for n in range(1, NODES + 1) if n != leader)
    node = cluster.node(broker)
    node.process.config["super.users"] = f"{CONFIG['super.users']};User:alice"
    cluster.restart(broker, wait_registered=True)
    topic = f"auto-{uuid.uuid4().hex[:8]}"
    refused = f"auto-creation of topic {topic} answered TOPIC_AUTHORIZATION_FAILED"

    # The broker lets User:alice's auto-creation through; the controller refuses it for her.
    assert alice_metadata(cluster, broker, topic) == E.UNKNOWN_TOPIC_OR_PARTITION
    wait_until(lambda: refused in node.process.stderr() or exists(cluster, leader, topic),
               "the controller answered the auto-creation", DEADLINE_S)
    assert not exists(cluster, leader, topic)
    assert refused in node.process.stderr()
    assert active_controller(cluster) == leader  # the refusal was the controller's own check

    # Granted CREATE on the topic, the same client's auto-creation goes through.
    grant = CreateAclsRequest.AclCreation(
        resource_type=TOPIC, resource_name=topic, resource_pattern_type=LITERAL, principal="User:alice",
        host="*", operation=CREATE, permission_type=ALLOW)
    answer = admin_request(cluster, leader, CreateAclsRequest(creations=[grant]), 3)
    assert answer.results[0].error_code == E.NONE, answer
    wait_until(lambda: alice_metadata(cluster, broker, topic) == E.NONE, "alice's topic auto-created",
               DEADLINE_S)


def test_concurrent_metadata_for_a_new_topic_send_one_creation(cluster: ClusterProcess) -> None:
    node_id = 1
    node = cluster.node(node_id)
    topic = f"burst-{uuid.uuid4().hex[:8]}"
    sent = f"sending the auto-creation of topic {topic} to the active controller"

    async def burst() -> list[int]:
        host, port = node.bootstrap.rsplit(":", 1)
        conns = [PeerConnection(host, int(port), client_id=f"burst-{i}") for i in range(BURST)]
        try:
            await asyncio.gather(*(c.send(MetadataRequest(topics=[]), version=12) for c in conns))
            answers: list[Any] = await asyncio.gather(
                *(c.send(metadata(topic, create=True), version=12) for c in conns))
            return [int(a.topics[0].error_code) for a in answers]
        finally:
            for c in conns:
                await c.close()

    codes = asyncio.run(asyncio.wait_for(burst(), DEADLINE_S))
    assert set(codes) <= {E.UNKNOWN_TOPIC_OR_PARTITION, E.NONE}, codes
    wait_until(lambda: exists(cluster, node_id, topic), "the topic is created", DEADLINE_S)
    assert node.process.stderr().count(sent) == 1, node.process.stderr().count(sent)


#: Kafka's AclPermissionType DENY
DENY = 2
#: Everyone may do anything no ACL names; the test's ACL denies User:ANONYMOUS, the PLAINTEXT
#: client, CREATE on one topic.
OPEN_AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "auto.create.topics.enable": True,
    "num.partitions": 1,
}


@pytest.fixture(params=["reference", "apache-kafka"])
def open_cluster(request: pytest.FixtureRequest) -> str:
    """A one-node cluster with ``OPEN_AUTHORIZER``: ours, or Apache Kafka 4.1's; its bootstrap."""
    if request.param == "apache-kafka":
        request.applymarker(pytest.mark.apache_kafka)
        return str(request.getfixturevalue("apache_kafka_factory")(**OPEN_AUTHORIZER).bootstrap)
    # No super user: the node registers itself as User:ANONYMOUS, which its controller allows once
    # its ACLs are loaded (allow.everyone.if.no.acl.found), as Kafka's does.
    cluster = request.getfixturevalue("reference_cluster")(1, OPEN_AUTHORIZER)
    return str(cluster.node(1).bootstrap)


def test_auto_creation_outcome_seen_by_the_client_is_kafkas(open_cluster: str) -> None:
    """A client denied CREATE on a topic gets TOPIC_AUTHORIZATION_FAILED; another topic is
    auto-created for it."""
    tag = uuid.uuid4().hex[:8]
    denied, allowed = f"denied-{tag}", f"allowed-{tag}"
    deny = CreateAclsRequest.AclCreation(
        resource_type=TOPIC, resource_name=denied, resource_pattern_type=LITERAL,
        principal="User:ANONYMOUS", host="*", operation=CREATE, permission_type=DENY)
    with WireClient(open_cluster, timeout=DEADLINE_S) as client:
        answer = client.request(CreateAclsRequest(creations=[deny]), 3)
        assert answer.results[0].error_code == E.NONE, answer

        def code(topic: str, create: bool = True) -> int:
            return int(client.request(metadata(topic, create=create), 12).topics[0].error_code)

        wait_until(lambda: code(denied) == E.TOPIC_AUTHORIZATION_FAILED, "the ACL is in force", DEADLINE_S)
        # Kafka answers the Metadata that asks for the creation, and those while it is in flight,
        # UNKNOWN_TOPIC_OR_PARTITION (``DefaultAutoTopicCreationManager.createTopics``).
        assert code(allowed) == E.UNKNOWN_TOPIC_OR_PARTITION
        wait_until(lambda: code(allowed) == E.NONE, "the allowed topic is auto-created", DEADLINE_S)
        # The topic's ACL takes it out of allow.everyone.if.no.acl.found: no DESCRIBE either.
        assert code(denied, create=False) == E.TOPIC_AUTHORIZATION_FAILED
