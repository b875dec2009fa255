"""ACLs and SCRAM credentials on a replicated cluster: written once through any broker, enforced
and served by every broker, as Kafka's KRaft brokers forward CreateAcls, DeleteAcls and
AlterUserScramCredentials to the controller and follow the metadata log (AclPublisher,
ScramPublisher).

A real three-node cluster with Kafka's StandardAuthorizer (no access without an ACL) and a
SASL_PLAINTEXT listener ``SASL`` on every node next to the PLAINTEXT one. The PLAINTEXT principal,
User:ANONYMOUS, is a super user (the nodes talk to each other on PLAINTEXT) and does the
administration through one chosen node; the principals under test log in on a chosen node's SASL
listener over raw connections, so every check is answered by exactly the node it names. What must
hold: an ACL created through node 1 allows (and its deletion through node 3 denies again) on every
node; a SCRAM user created through node 2 logs in on every node; both survive a restart of every
node (replayed from the metadata log and its snapshots); a bad request gets Kafka's error from any
node and changes nothing.

Every API that changes the cluster is authorized as the client, as Kafka's ControllerApis does,
on both ways to the controller: through a broker (which forwards it in an Envelope naming the
client) and directly on the controller listener (``--bootstrap-controller``). The controller
listener is SASL_PLAINTEXT here, so User:alice logs in there too; the nodes log in as User:admin,
a super user. A principal without rights gets Kafka's error on each path and changes nothing; a
granted principal (User:bob) and a super user get through.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from reference_broker.testing import ClusterProcess, wait_until
from sdk.protocol.codec import encode, encode_request
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AddRaftVoterRequest,
    AlterClientQuotasRequest,
    AlterPartitionReassignmentsRequest,
    AlterUserScramCredentialsRequest,
    ApiVersionsRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DefaultPrincipalData,
    DeleteAclsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClientQuotasRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeQuorumRequest,
    DescribeUserScramCredentialsRequest,
    ElectLeadersRequest,
    EnvelopeRequest,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
    MetadataRequest,
    RemoveRaftVoterRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    UpdateFeaturesRequest,
)
from tests.reference_broker.wire import WireClient

pytestmark = [pytest.mark.interop, pytest.mark.slow]

NODES = 3
ALICE_PASSWORD = "alice-pw"
BOB_PASSWORD = "bob-pw"
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    f' username="admin" password="admin-pw" user_admin="admin-pw" user_alice="{ALICE_PASSWORD}"'
    f' user_bob="{BOB_PASSWORD}";'
)
CONFIG: dict[str, Any] = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": False,
    "super.users": "User:ANONYMOUS;User:admin",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "listener.name.sasl.plain.sasl.jaas.config": PLAIN_JAAS,
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT,SASL:SASL_PLAINTEXT",
    "sasl.mechanism.controller.protocol": "PLAIN",
    "listener.name.controller.plain.sasl.jaas.config": PLAIN_JAAS,
    # Snapshots every few records, so a restarted node loads the ACLs and credentials from one.
    "metadata.log.max.record.bytes.between.snapshots": 2048,
    "default.replication.factor": NODES,
}
# Kafka's wire codes (AclResourceType, PatternType, AclOperation, AclPermissionType, ScramMechanism)
TOPIC, LITERAL, MATCH, DESCRIBE, ALLOW, ANY = 2, 3, 2, 8, 3, 1
SCRAM_SHA_256 = 1
DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    data = tmp_path_factory.mktemp("acl-cluster") / "data"
    with ClusterProcess(NODES, CONFIG, extra_listeners={"SASL": "SASL_PLAINTEXT"}, data_dir=data) as running:
        yield running


def sasl_address(cluster: ClusterProcess, node_id: int) -> str:
    """Node ``node_id``'s advertised SASL listener address (host:port)."""
    for entry in cluster.node(node_id).process.config["advertised.listeners"].split(","):
        name, _, address = entry.partition("://")
        if name == "SASL":
            return address
    raise AssertionError(f"node {node_id} has no SASL listener")


def admin_request(cluster: ClusterProcess, node_id: int, request: Any, version: int) -> Any:
    """``request`` answered by node ``node_id`` for the super user (its PLAINTEXT listener)."""
    with WireClient(cluster.node(node_id).bootstrap, timeout=DEADLINE_S + 10) as client:
        return client.request(request, version)


def create_topic(cluster: ClusterProcess, topic: str) -> None:
    request = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=1, replication_factor=-1)],
        timeout_ms=30_000,
    )
    answer = admin_request(cluster, 1, request, 7)
    assert answer.topics[0].error_code == ErrorCode.NONE, answer
    wait_until(lambda: all(cluster.partition(topic, 0, via=n) is not None for n in range(1, NODES + 1)),
               f"every node knows {topic}", DEADLINE_S)


def describe_grant(topic: str, principal: str = "User:alice", pattern: int = LITERAL) -> Any:
    return CreateAclsRequest.AclCreation(
        resource_type=TOPIC,
        resource_name=topic,
        resource_pattern_type=pattern,
        principal=principal,
        host="*",
        operation=DESCRIBE,
        permission_type=ALLOW,
    )


def topic_filter(topic: str | None, pattern: int = LITERAL) -> Any:
    return DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=TOPIC,
        resource_name_filter=topic,
        pattern_type_filter=pattern,
        principal_filter=None,
        host_filter=None,
        operation=ANY,
        permission_type=ANY,
    )


def acls_on(cluster: ClusterProcess, node_id: int, topic: str) -> list[tuple[str, str, int]]:
    """(resource name, principal, operation) of the ACLs node ``node_id`` describes for ``topic``."""
    request = DescribeAclsRequest(
        resource_type_filter=TOPIC,
        resource_name_filter=topic,
        pattern_type_filter=ANY,
        principal_filter=None,
        host_filter=None,
        operation=ANY,
        permission_type=ANY,
    )
    answer = admin_request(cluster, node_id, request, 3)
    assert answer.error_code == ErrorCode.NONE, answer
    return sorted(
        (res.resource_name, acl.principal, acl.operation) for res in answer.resources for acl in res.acls
    )


def plain_login(client: WireClient, user: str, password: str) -> None:
    assert client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    answer = client.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()), 2)
    assert answer.error_code == 0, answer


def alice_topic_error(cluster: ClusterProcess, node_id: int, topic: str) -> int:
    """The error node ``node_id`` answers User:alice's Metadata for ``topic`` with."""
    with WireClient(sasl_address(cluster, node_id)) as client:
        plain_login(client, "alice", ALICE_PASSWORD)
        answer = client.request(
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                            allow_auto_topic_creation=False),
            12,
        )
    return int(answer.topics[0].error_code)


def _equals(expected: Any, function: Callable[..., Any], *args: Any) -> bool:
    return bool(function(*args) == expected)


def wait_alice(cluster: ClusterProcess, topic: str, expected: int, nodes: range) -> None:
    for node_id in nodes:
        wait_until(partial(_equals, expected, alice_topic_error, cluster, node_id, topic),
                   f"node {node_id} answers alice's Metadata of {topic} with error {expected}", DEADLINE_S)


def upsert(user: str, password: str, *, iterations: int = 4096) -> AlterUserScramCredentialsRequest:
    """AlterUserScramCredentials setting ``user``'s SCRAM-SHA-256 credential for ``password``."""
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name=user, mechanism=SCRAM_SHA_256, iterations=iterations, salt=salt, salted_password=salted
    )
    return AlterUserScramCredentialsRequest(deletions=[], upsertions=[upsertion])


def scram_login(cluster: ClusterProcess, node_id: int, user: str, password: str) -> bool:
    """Whether ``user`` completes SCRAM-SHA-256 with ``password`` on node ``node_id``."""
    with WireClient(sasl_address(cluster, node_id)) as client:
        assert client.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1).error_code == 0
        first_bare = f"n={user},r=clientnonce"
        server_first = client.request(SaslAuthenticateRequest(auth_bytes=f"n,,{first_bare}".encode()), 2)
        if server_first.error_code != ErrorCode.NONE:
            return False
        attrs = dict(kv.split("=", 1) for kv in server_first.auth_bytes.decode().split(","))
        final_bare = f"c=biws,r={attrs['r']}"
        auth_message = f"{first_bare},{server_first.auth_bytes.decode()},{final_bare}".encode()
        salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, "sha256").digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        client_final = f"{final_bare},p={base64.b64encode(proof).decode()}".encode()
        final = client.request(SaslAuthenticateRequest(auth_bytes=client_final), 2)
        return bool(final.error_code == ErrorCode.NONE)


def snapshots(cluster: ClusterProcess, node_id: int) -> set[str]:
    """The metadata snapshot files node ``node_id`` has written (``<offset>-<epoch>.checkpoint``)."""
    return {path.name for path in cluster.node(node_id).process.data_dir.glob("**/*.checkpoint")}


def scram_users_on(cluster: ClusterProcess, node_id: int) -> set[str]:
    answer = admin_request(cluster, node_id, DescribeUserScramCredentialsRequest(users=None), 0)
    assert answer.error_code == ErrorCode.NONE, answer
    return {result.user for result in answer.results if result.error_code == ErrorCode.NONE}


def test_acl_created_through_one_node_is_enforced_by_every_node(cluster: ClusterProcess) -> None:
    topic = f"guarded-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic)
    every = range(1, NODES + 1)
    for node_id in every:  # no ACL: alice may not even see the topic
        assert alice_topic_error(cluster, node_id, topic) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    created = admin_request(cluster, 1, CreateAclsRequest(creations=[describe_grant(topic)]), 3)
    assert [r.error_code for r in created.results] == [ErrorCode.NONE]
    wait_alice(cluster, topic, ErrorCode.NONE, every)
    for node_id in every:
        assert acls_on(cluster, node_id, topic) == [(topic, "User:alice", DESCRIBE)]

    deleted = admin_request(cluster, 3, DeleteAclsRequest(filters=[topic_filter(topic)]), 3)
    assert [len(r.matching_acls) for r in deleted.filter_results] == [1]
    wait_alice(cluster, topic, ErrorCode.TOPIC_AUTHORIZATION_FAILED, every)
    for node_id in every:
        assert acls_on(cluster, node_id, topic) == []


def test_scram_user_created_through_one_node_logs_in_on_every_node(cluster: ClusterProcess) -> None:
    user = f"carol-{uuid.uuid4().hex[:6]}"
    assert not scram_login(cluster, 1, user, "carol-pw")
    answer = admin_request(cluster, 2, upsert(user, "carol-pw"), 0)
    assert [(r.user, r.error_code) for r in answer.results] == [(user, ErrorCode.NONE)]
    for node_id in (1, 3, 2):
        wait_until(partial(scram_login, cluster, node_id, user, "carol-pw"),
                   f"{user} logs in on node {node_id}", DEADLINE_S)
        assert not scram_login(cluster, node_id, user, "wrong-pw")
        assert user in scram_users_on(cluster, node_id)


def test_bad_requests_get_kafkas_errors_from_any_node_and_change_nothing(cluster: ClusterProcess) -> None:
    topic = f"kept-{uuid.uuid4().hex[:6]}"
    created = admin_request(cluster, 1, CreateAclsRequest(creations=[describe_grant(topic)]), 3)
    assert [r.error_code for r in created.results] == [ErrorCode.NONE]
    for node_id in range(1, NODES + 1):
        wait_until(partial(_equals, [(topic, "User:alice", DESCRIBE)], acls_on, cluster, node_id, topic),
                   f"node {node_id} describes the ACL of {topic}", DEADLINE_S)

    # A MATCH pattern cannot be stored; a principal needs its type.
    bad = CreateAclsRequest(creations=[describe_grant(topic, pattern=MATCH), describe_grant(topic, "alice")])
    answer = admin_request(cluster, 2, bad, 3)
    assert [(r.error_code, r.error_message) for r in answer.results] == [
        (ErrorCode.INVALID_REQUEST, "Invalid pattern type MATCH"),
        (ErrorCode.INVALID_REQUEST, "Could not parse principal from `alice` (no colon is found"
                                    " separating the principal type from the principal name)"),
    ]
    # A filter with an unknown pattern type deletes nothing (Kafka's AclControlManager.validateFilter).
    refused = admin_request(cluster, 3, DeleteAclsRequest(filters=[topic_filter(topic, pattern=99)]), 3)
    assert [(r.error_code, r.error_message) for r in refused.filter_results] == [
        (ErrorCode.INVALID_REQUEST, "Unknown patternFilter.")
    ]
    user = f"dave-{uuid.uuid4().hex[:6]}"
    answer = admin_request(cluster, 1, upsert(user, "pw", iterations=100), 0)
    assert [(r.error_code, r.error_message) for r in answer.results] == [
        (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    ]
    missing = AlterUserScramCredentialsRequest(
        deletions=[
            AlterUserScramCredentialsRequest.ScramCredentialDeletion(name=user, mechanism=SCRAM_SHA_256)
        ],
        upsertions=[],
    )
    answer = admin_request(cluster, 3, missing, 0)
    assert [r.error_code for r in answer.results] == [ErrorCode.RESOURCE_NOT_FOUND]
    for node_id in range(1, NODES + 1):
        assert acls_on(cluster, node_id, topic) == [(topic, "User:alice", DESCRIBE)]
        assert user not in scram_users_on(cluster, node_id)


def test_acls_and_credentials_survive_a_restart_of_every_node(cluster: ClusterProcess) -> None:
    topic = f"durable-{uuid.uuid4().hex[:6]}"
    user = f"erin-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic)
    created = admin_request(cluster, 2, CreateAclsRequest(creations=[describe_grant(topic)]), 3)
    assert [r.error_code for r in created.results] == [ErrorCode.NONE]
    answer = admin_request(cluster, 3, upsert(user, "erin-pw"), 0)
    assert [r.error_code for r in answer.results] == [ErrorCode.NONE]
    every = range(1, NODES + 1)
    wait_alice(cluster, topic, ErrorCode.NONE, every)
    for node_id in every:
        wait_until(partial(scram_login, cluster, node_id, user, "erin-pw"),
                   f"{user} logs in on node {node_id}", DEADLINE_S)
    # Every node's image holds both now: a snapshot any node writes from here on states them, and
    # a restarted node loads its latest snapshot before the rest of the log.
    before = {n: snapshots(cluster, n) for n in every}
    padding = 0

    def every_node_snapshotted_again() -> bool:
        nonlocal padding
        if all(snapshots(cluster, n) - before[n] for n in every):
            return True
        padding += 1
        create_topic(cluster, f"{topic}-padding-{padding}")
        return False

    wait_until(every_node_snapshotted_again, "a metadata snapshot on every node", 60)

    for node_id in every:
        cluster.stop(node_id)
    for node_id in every:
        cluster.node(node_id).process.launch()
    for node_id in every:
        cluster.node(node_id).process.wait_listening()
    cluster.wait_until_registered()

    wait_alice(cluster, topic, ErrorCode.NONE, every)
    for node_id in every:
        wait_until(partial(scram_login, cluster, node_id, user, "erin-pw"),
                   f"{user} logs in on node {node_id} after the restart", DEADLINE_S)
        assert acls_on(cluster, node_id, topic) == [(topic, "User:alice", DESCRIBE)]


# -- authorization on the way to the controller ----------------------------------------------------

CLUSTER_RESOURCE, CONFIG_TOPIC, CONFIG_BROKER = 4, 2, 4
ALTER, CREATE = 7, 5  # AclOperation codes


def controller_address(cluster: ClusterProcess, node_id: int) -> str:
    node = cluster.node(node_id)
    return f"{node.host}:{node.controller_port}"


def active_controller(cluster: ClusterProcess) -> int:
    answer = admin_request(cluster, 1, DescribeQuorumRequest(topics=[
        DescribeQuorumRequest.TopicData(topic_name="__cluster_metadata",
                                        partitions=[DescribeQuorumRequest.TopicData.PartitionData()])
    ]), 1)
    leader = answer.topics[0].partitions[0].leader_id
    assert leader > 0, answer
    return int(leader)


def as_user(address: str, user: str, password: str, request: Any, version: int) -> Any:
    """``request`` answered at ``address`` (a SASL listener) to ``user`` logged in with PLAIN."""
    with WireClient(address, timeout=DEADLINE_S + 10) as client:
        plain_login(client, user, password)
        return client.request(request, version)


def quorum_request() -> DescribeQuorumRequest:
    return DescribeQuorumRequest(topics=[
        DescribeQuorumRequest.TopicData(topic_name="__cluster_metadata",
                                        partitions=[DescribeQuorumRequest.TopicData.PartitionData()])
    ])


def changing_requests(topic: str, new_topic: str) -> list[tuple[str, Any, int, Callable[[Any], Any], Any]]:
    """(what, request, version, the answer's error codes, the codes a principal without rights
    gets) for every API that changes the cluster, and the describing ones Kafka's controller
    guards, aimed at the existing ``topic`` and the absent ``new_topic``."""
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    Quota = AlterClientQuotasRequest.EntryData
    scram = upsert("mallory", "mallory-pw")
    refused_topic = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    refused_cluster = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return [
        ("CreateTopics", CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=new_topic, num_partitions=1, replication_factor=-1)], timeout_ms=30_000), 7,
         lambda a: [t.error_code for t in a.topics], [refused_topic]),
        ("DeleteTopics", DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=topic)],
                                             timeout_ms=30_000), 6,
         lambda a: [t.error_code for t in a.responses], [refused_topic]),
        ("CreatePartitions", CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
            name=topic, count=3, assignments=None)], timeout_ms=30_000), 3,
         lambda a: [t.error_code for t in a.results], [refused_topic]),
        ("IncrementalAlterConfigs", IncrementalAlterConfigsRequest(resources=[
            R(resource_type=CONFIG_TOPIC, resource_name=topic,
              configs=[R.AlterableConfig(name="retention.ms", config_operation=0, value="1000")]),
            R(resource_type=CONFIG_BROKER, resource_name="",
              configs=[R.AlterableConfig(name="log.retention.ms", config_operation=0, value="1000")]),
        ]), 1, lambda a: [r.error_code for r in a.responses], [refused_topic, refused_cluster]),
        ("ElectLeaders", ElectLeadersRequest(election_type=0, topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[0])], timeout_ms=30_000), 2,
         lambda a: a.error_code, refused_cluster),
        ("AlterPartitionReassignments", AlterPartitionReassignmentsRequest(topics=[
            AlterPartitionReassignmentsRequest.ReassignableTopic(name=topic, partitions=[
                AlterPartitionReassignmentsRequest.ReassignableTopic.ReassignablePartition(
                    partition_index=0, replicas=[1, 2])])], timeout_ms=30_000), 0,
         lambda a: a.error_code, refused_cluster),
        ("ListPartitionReassignments", ListPartitionReassignmentsRequest(topics=None, timeout_ms=30_000), 0,
         lambda a: a.error_code, refused_cluster),
        ("CreateAcls", CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
            resource_type=CLUSTER_RESOURCE, resource_name="kafka-cluster", resource_pattern_type=LITERAL,
            principal="User:alice", host="*", operation=ALTER, permission_type=ALLOW)]), 3,
         lambda a: [r.error_code for r in a.results], [refused_cluster]),
        ("DeleteAcls", DeleteAclsRequest(filters=[topic_filter(None, pattern=ANY)]), 3,
         lambda a: [r.error_code for r in a.filter_results], [refused_cluster]),
        ("AlterUserScramCredentials", scram, 0,
         lambda a: [r.error_code for r in a.results], [refused_cluster]),
        ("AlterClientQuotas", AlterClientQuotasRequest(entries=[Quota(
            entity=[Quota.EntityData(entity_type="user", entity_name="alice")],
            ops=[Quota.OpData(key="producer_byte_rate", value=1.0, remove=False)],
        )]), 1, lambda a: [e.error_code for e in a.entries], [refused_cluster]),
        ("DescribeQuorum", quorum_request(), 1, lambda a: a.error_code, refused_cluster),
        # ALTER on the cluster comes before any quorum check (a static quorum refuses both)
        ("AddRaftVoter", AddRaftVoterRequest(
            cluster_id=None, timeout_ms=30_000, voter_id=9, voter_directory_id=uuid.uuid4(),
            listeners=[AddRaftVoterRequest.Listener(name="CONTROLLER", host="127.0.0.1", port=1)]), 0,
         lambda a: a.error_code, refused_cluster),
        ("RemoveRaftVoter", RemoveRaftVoterRequest(
            cluster_id=None, voter_id=3, voter_directory_id=uuid.uuid4()), 0,
         lambda a: a.error_code, refused_cluster),
        ("UpdateFeatures", UpdateFeaturesRequest(feature_updates=[UpdateFeaturesRequest.FeatureUpdateKey(
            feature="transaction.version", max_version_level=1, upgrade_type=2)]), 1,
         lambda a: a.error_code, refused_cluster),
    ]


def finalized_transaction_version(cluster: ClusterProcess, node_id: int) -> int:
    answer = admin_request(cluster, node_id, ApiVersionsRequest(client_software_name="t",
                                                                client_software_version="1"), 3)
    levels = {f.name: f.max_version_level for f in answer.finalized_features}
    return int(levels.get("transaction.version", 0))


def assert_nothing_changed(cluster: ClusterProcess, topic: str, new_topic: str) -> None:
    """What ``changing_requests`` would have changed is as before, on every node."""
    for node_id in range(1, NODES + 1):
        assert cluster.partition(new_topic, 0, via=node_id) is None
        part = cluster.partition(topic, 0, via=node_id)
        assert part is not None and sorted(part.replica_nodes) == [1, 2, 3], part
        assert cluster.partition(topic, 1, via=node_id) is None
        assert acls_on(cluster, node_id, topic) == []
        assert "mallory" not in scram_users_on(cluster, node_id)
        assert finalized_transaction_version(cluster, node_id) == 2
    reassigning = admin_request(cluster, 1, ListPartitionReassignmentsRequest(topics=None), 0)
    assert reassigning.error_code == ErrorCode.NONE and reassigning.topics == [], reassigning
    configs = admin_request(cluster, 1, DescribeConfigsRequest(resources=[
        DescribeConfigsRequest.DescribeConfigsResource(resource_type=CONFIG_TOPIC, resource_name=topic,
                                                       configuration_keys=["retention.ms"])]), 4)
    assert [(c.name, c.value) for c in configs.results[0].configs] != [("retention.ms", "1000")], configs
    quotas = admin_request(cluster, 1, DescribeClientQuotasRequest(components=[], strict=False), 1)
    assert quotas.entries == [], quotas


def refusals(address: str, topic: str, new_topic: str) -> dict[str, Any]:
    """What User:alice gets for each of ``changing_requests`` at ``address``, where the expected
    refusal differs."""
    wrong = {}
    for what, request, version, codes, expected in changing_requests(topic, new_topic):
        got = codes(as_user(address, "alice", ALICE_PASSWORD, request, version))
        if got != expected:
            wrong[what] = (got, expected)
    return wrong


def test_client_without_rights_is_refused_through_a_broker_and_nothing_changes(
    cluster: ClusterProcess,
) -> None:
    """Through every broker, User:alice's forwarded requests are authorized as alice (not as the
    broker forwarding them): each gets Kafka's error and the cluster is as before."""
    topic, new_topic = f"held-{uuid.uuid4().hex[:6]}", f"wanted-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic)
    for node_id in range(1, NODES + 1):
        assert refusals(sasl_address(cluster, node_id), topic, new_topic) == {}, f"through node {node_id}"
    assert_nothing_changed(cluster, topic, new_topic)


def test_client_without_rights_is_refused_on_the_controller_listener_and_nothing_changes(
    cluster: ClusterProcess,
) -> None:
    """Straight to the controller listener (the active controller and the others), User:alice
    gets the same errors, DescribeCluster too (ALTER on a controller), and nothing changes."""
    topic, new_topic = f"held-{uuid.uuid4().hex[:6]}", f"wanted-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic)
    active = active_controller(cluster)
    for node_id in [active] + [n for n in range(1, NODES + 1) if n != active]:
        address = controller_address(cluster, node_id)
        assert refusals(address, topic, new_topic) == {}, f"on node {node_id}'s controller listener"
        described = as_user(address, "alice", ALICE_PASSWORD, DescribeClusterRequest(endpoint_type=2), 1)
        assert described.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, described
    assert_nothing_changed(cluster, topic, new_topic)


def test_forged_envelope_from_a_client_is_refused(cluster: ClusterProcess) -> None:
    """Only nodes may forward (CLUSTER_ACTION): an Envelope User:alice sends naming the super
    user User:ANONYMOUS is refused as a whole, and the request inside is not run."""
    new_topic = f"forged-{uuid.uuid4().hex[:6]}"
    inner = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=new_topic, num_partitions=1, replication_factor=-1)], timeout_ms=30_000)
    envelope = EnvelopeRequest(request_data=encode_request(inner, 7, 9, "forger"),
                               request_principal=b"\x00\x00" + encode(  # version 0, Kafka's serde
                                   DefaultPrincipalData(type="User", name="ANONYMOUS"), 0),
                               client_host_address=bytes([127, 0, 0, 1]))
    answer = as_user(controller_address(cluster, active_controller(cluster)), "alice", ALICE_PASSWORD,
                     envelope, 0)
    assert (answer.error_code, answer.response_data) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    assert cluster.partition(new_topic, 0, via=1) is None


def test_granted_principal_and_super_user_get_through_both_paths(cluster: ClusterProcess) -> None:
    """User:bob, granted CREATE on his topics and ALTER on the cluster, creates a topic through a
    broker and one on the active controller's listener, elects leaders, checks a feature change
    and describes the controllers; the nodes' super user User:admin describes the quorum on a
    controller listener."""
    prefix = f"bob-{uuid.uuid4().hex[:6]}"
    grants = [
        CreateAclsRequest.AclCreation(resource_type=TOPIC, resource_name=prefix, resource_pattern_type=4,
                                      principal="User:bob", host="*", operation=CREATE,
                                      permission_type=ALLOW),
        CreateAclsRequest.AclCreation(resource_type=CLUSTER_RESOURCE, resource_name="kafka-cluster",
                                      resource_pattern_type=LITERAL, principal="User:bob", host="*",
                                      operation=ALTER, permission_type=ALLOW),
    ]
    created = admin_request(cluster, 1, CreateAclsRequest(creations=grants), 3)
    assert [r.error_code for r in created.results] == [ErrorCode.NONE, ErrorCode.NONE]

    def create_as_bob(address: str, name: str) -> int:
        request = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=1, replication_factor=-1)], timeout_ms=30_000)
        return int(as_user(address, "bob", BOB_PASSWORD, request, 7).topics[0].error_code)

    def granted(address: str, name: str) -> bool:
        return create_as_bob(address, name) != ErrorCode.TOPIC_AUTHORIZATION_FAILED

    def exists(name: str) -> bool:
        return cluster.partition(name, 0, via=1) is not None

    for address, name in ((sasl_address(cluster, 2), f"{prefix}-via-broker"),
                          (controller_address(cluster, active_controller(cluster)), f"{prefix}-direct")):
        wait_until(partial(granted, address, name), f"bob's grant reaches {address}", DEADLINE_S)
        wait_until(partial(exists, name), f"{name} exists", DEADLINE_S)
    topic = f"{prefix}-via-broker"
    elect = ElectLeadersRequest(election_type=0, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[0])], timeout_ms=30_000)
    elected = as_user(sasl_address(cluster, 3), "bob", BOB_PASSWORD, elect, 2)
    assert elected.error_code == ErrorCode.NONE, elected
    controller = controller_address(cluster, active_controller(cluster))
    described = as_user(controller, "bob", BOB_PASSWORD, DescribeClusterRequest(endpoint_type=2), 1)
    assert described.error_code == ErrorCode.NONE and len(described.brokers) == NODES, described
    dry_run = UpdateFeaturesRequest(validate_only=True, feature_updates=[
        UpdateFeaturesRequest.FeatureUpdateKey(feature="transaction.version", max_version_level=1,
                                               upgrade_type=2)])
    checked = as_user(sasl_address(cluster, 2), "bob", BOB_PASSWORD, dry_run, 1)
    assert checked.error_code == ErrorCode.NONE, checked
    quorum = as_user(controller, "admin", "admin-pw", quorum_request(), 1)
    assert quorum.error_code == ErrorCode.NONE and quorum.topics[0].partitions[0].leader_id > 0, quorum


def command_config(directory: Path, user: str, password: str) -> Path:
    """A Kafka tool's ``--command-config`` logging in as ``user`` with PLAIN."""
    path = directory / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required"
        f' username="{user}" password="{password}";\n'
    )
    return path


@pytest.mark.apache_kafka
def test_kafka_metadata_quorum_with_bootstrap_controller_needs_rights(
    cluster: ClusterProcess, tmp_path: Path
) -> None:
    """Kafka's own kafka-metadata-quorum, bootstrapped to the controllers: User:alice is refused
    with Kafka's ClusterAuthorizationException, the nodes' super user gets the quorum's status."""
    from tests.apache_kafka import kafka_tool, require_apache_kafka

    require_apache_kafka()
    controllers = ",".join(controller_address(cluster, n) for n in range(1, NODES + 1))

    def describe(user: str, password: str) -> Any:
        return kafka_tool("org.apache.kafka.tools.MetadataQuorumCommand",
                          "--bootstrap-controller", controllers,
                          "--command-config", str(command_config(tmp_path, user, password)),
                          "describe", "--status")

    refused = describe("alice", ALICE_PASSWORD)
    assert refused.returncode != 0
    assert "ClusterAuthorizationException" in refused.stdout + refused.stderr, refused
    allowed = describe("admin", "admin-pw")
    assert allowed.returncode == 0, allowed
    assert f"LeaderId:               {active_controller(cluster)}" in allowed.stdout, allowed.stdout
