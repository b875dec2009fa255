"""ACL authorization with Kafka's model on a broker with ``authorizer.class.name``: two SASL
principals, one granted and one not, per API (produce, fetch, group join and commit,
transactional id, create/delete topic, describe configs); deny wins over allow; implied
operations; Metadata hides what may not be described; super users; ACLs survive a restart;
CreateAcls/DescribeAcls/DeleteAcls through confluent-kafka's admin client."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from reference_broker.testing import BrokerProcess
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AlterClientQuotasRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClientQuotasRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    JoinGroupRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    ProduceRequest,
)
from sdk.records import RecordBatchBuilder
from tests.reference_broker.security.conftest import PLAIN_JAAS, Certs, MultiBroker, Ports, plain_login
from tests.reference_broker.wire import WireClient, fetch_request

AUTHZ_CONFIG = {
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
    "num.partitions": 1,
}
TOPIC = "orders"


def _sasl(ports: Ports, user: str) -> dict[str, Any]:
    return _sasl_at(ports.address("SASL_PLAINTEXT"), user)


def _sasl_at(address: str, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-pw",
    }


def _acl(
    resource: ResourceType,
    name: str,
    principal: str,
    op: AclOperation,
    *,
    allow: bool = True,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
) -> AclBinding:
    permission = AclPermissionType.ALLOW if allow else AclPermissionType.DENY
    return AclBinding(resource, name, pattern, principal, "*", op, permission)


def _create_acls(admin: AdminClient, acls: list[AclBinding]) -> None:
    for future in admin.create_acls(acls).values():
        future.result(30)


@pytest.fixture
def secured(multi_listener_broker: MultiBroker) -> Iterator[tuple[BrokerProcess, Ports, AdminClient]]:
    broker, ports = multi_listener_broker(["SASL_PLAINTEXT"], AUTHZ_CONFIG)
    admin = AdminClient(_sasl(ports, "admin"))
    for future in admin.create_topics(_new_topics(TOPIC)).values():
        future.result(30)
    yield broker, ports, admin


def _new_topics(*names: str) -> list[Any]:
    from confluent_kafka.admin import NewTopic

    return [NewTopic(name, num_partitions=1, replication_factor=1) for name in names]


def _client(ports: Ports, user: str) -> WireClient:
    return _login(ports.address("SASL_PLAINTEXT"), user)


def _login(address: str, user: str) -> WireClient:
    client = WireClient(address)
    plain_login(client, user, f"{user}-pw")
    return client


def _produce(
    client: WireClient, topic: str, transactional_id: str | None = None, *, transactional_batch: bool = True
) -> int:
    """Produce one record; with ``transactional_id``, in a transactional batch unless told not to."""
    if transactional_id is None or not transactional_batch:
        builder = RecordBatchBuilder()
    else:
        builder = RecordBatchBuilder(producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True)
    builder.append(0, b"k", b"v")
    request = ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=builder.build())],
            )
        ],
    )
    return int(client.request(request, 9).responses[0].partition_responses[0].error_code)


def _fetch(client: WireClient, topic: str) -> int:
    return int(client.request(fetch_request(topic), 12).responses[0].partitions[0].error_code)


def _join(client: WireClient, group: str) -> int:
    request = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    return int(client.request(request, 5).error_code)


def _coordinator_then_join(client: WireClient, group: str) -> int:
    """JoinGroup after FindCoordinator, which makes Kafka create its offsets topic."""
    found = client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4).coordinators[0]
    return int(found.error_code) or _join(client, group)


def _coordinator_then_init(client: WireClient, transactional_id: str) -> int:
    """InitProducerId after FindCoordinator, which makes Kafka create its transaction log."""
    request = FindCoordinatorRequest(key_type=1, coordinator_keys=[transactional_id])
    found = client.request(request, 4).coordinators[0]
    return int(found.error_code) or _init_txn(client, transactional_id)


def _wait_for_acls(admin: AdminClient, count: int) -> None:
    """Until the broker's authorizer knows ``count`` ACLs (Kafka applies them from its metadata
    log after CreateAcls returns)."""
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    deadline = time.monotonic() + 30
    while len(admin.describe_acls(everything).result(30)) < count:
        assert time.monotonic() < deadline, "the ACLs never showed"
        time.sleep(0.2)


def _commit(client: WireClient, group: str, topic: str) -> int:
    request = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)
                ],
            )
        ],
    )
    return int(client.request(request, 8).topics[0].partitions[0].error_code)


def _init_txn(client: WireClient, transactional_id: str) -> int:
    request = InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=10000, producer_id=-1, producer_epoch=-1
    )
    return int(client.request(request, 4).error_code)


def _create_topic(client: WireClient, name: str) -> int:
    request = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name=name, num_partitions=1, replication_factor=1)],
        timeout_ms=5000,
    )
    return int(client.request(request, 5).topics[0].error_code)


def _delete_topic(client: WireClient, name: str) -> int:
    return int(
        client.request(DeleteTopicsRequest(topic_names=[name], timeout_ms=5000), 4).responses[0].error_code
    )


def _describe_configs(client: WireClient, resource_type: int, name: str) -> int:
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=resource_type, resource_name=name, configuration_keys=None
    )
    return int(client.request(DescribeConfigsRequest(resources=[resource]), 4).results[0].error_code)


def _grant_alice(admin: AdminClient) -> None:
    alice = "User:alice"
    prefixed = ResourcePatternType.PREFIXED
    _create_acls(
        admin,
        [
            _acl(ResourceType.TOPIC, TOPIC, alice, AclOperation.WRITE),
            _acl(ResourceType.TOPIC, TOPIC, alice, AclOperation.READ),
            _acl(ResourceType.GROUP, "alice-", alice, AclOperation.READ, pattern=prefixed),
            _acl(ResourceType.TRANSACTIONAL_ID, "alice-tx", alice, AclOperation.WRITE),
            _acl(ResourceType.TOPIC, "alice-", alice, AclOperation.ALL, pattern=prefixed),
            _acl(ResourceType.TOPIC, TOPIC, alice, AclOperation.DESCRIBE_CONFIGS),
        ],
    )
    _wait_for_acls(admin, 6)


_RETRIABLE = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


def _settled(call: Callable[[], int]) -> int:
    """The call's error code once the coordinator is ready (Kafka creates its topics lazily)."""
    deadline = time.monotonic() + 60
    code = call()
    while code in _RETRIABLE and time.monotonic() < deadline:
        time.sleep(0.2)
        code = call()
    return code


def _codes_per_api(address: str) -> dict[str, Any]:
    """What alice (granted by ``_grant_alice``) and bob (granted nothing) get from each API."""
    listed = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=TOPIC,
                partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)],
            )
        ],
    )
    auto = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="alice-auto")], allow_auto_topic_creation=True
    )
    named = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)])
    any_acl = DescribeAclsRequest(
        resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
    )
    quotas = DescribeClientQuotasRequest(components=[], strict=False)
    quota_change = AlterClientQuotasRequest(
        entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[AlterClientQuotasRequest.EntityData(entity_type="user", entity_name="bob")],
                ops=[AlterClientQuotasRequest.OpData(key="consumer_byte_rate", value=1024.0, remove=False)],
            )
        ],
        validate_only=True,
    )
    with _login(address, "alice") as a, _login(address, "bob") as b:
        return {
            "produce": (_produce(a, TOPIC), _produce(b, TOPIC)),
            "fetch": (_fetch(a, TOPIC), _fetch(b, TOPIC)),
            "join": (_settled(lambda: _coordinator_then_join(a, "alice-group")), _join(b, "alice-group")),
            "commit": (_settled(lambda: _commit(a, "alice-group", TOPIC)), _commit(b, "alice-group", TOPIC)),
            "commit unauthorized topic": _commit(a, "alice-group", "someone-elses"),
            "init transactional id": (
                _settled(lambda: _coordinator_then_init(a, "alice-tx")),
                _init_txn(b, "alice-tx"),
            ),
            "transactional produce": _produce(b, TOPIC, transactional_id="alice-tx"),
            "plain produce with a transactional id": _produce(
                b, TOPIC, "alice-tx", transactional_batch=False
            ),
            "create topic": (_create_topic(a, "alice-new"), _create_topic(b, "alice-new2")),
            "create topic outside the prefix": _create_topic(a, "bob-new"),
            "delete topic": (_delete_topic(b, "alice-new"), _delete_topic(a, "alice-new")),
            "describe topic configs": (_describe_configs(a, 2, TOPIC), _describe_configs(b, 2, TOPIC)),
            "describe broker configs": _describe_configs(a, 4, "1"),
            "list offsets": tuple(c.request(listed, 5).topics[0].partitions[0].error_code for c in (a, b)),
            "metadata of all topics": (
                TOPIC in {t.name for t in a.request(MetadataRequest(topics=None), 12).topics},
                [t.name for t in b.request(MetadataRequest(topics=None), 12).topics],
            ),
            "metadata of a named topic": b.request(named, 12).topics[0].error_code,
            # Kafka answers UNKNOWN_TOPIC_OR_PARTITION while it creates the topic, this broker NONE.
            "auto-create by metadata": a.request(auto, 12).topics[0].error_code
            != ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            "find group coordinator": b.request(
                FindCoordinatorRequest(key_type=0, coordinator_keys=["alice-group"]), 4
            )
            .coordinators[0]
            .error_code,
            "group authorized operations": a.request(
                DescribeGroupsRequest(groups=["alice-group"], include_authorized_operations=True), 5
            )
            .groups[0]
            .authorized_operations,
            "describe acls": b.request(any_acl, 3).error_code,
            "describe client quotas": b.request(quotas, 1).error_code,
            "alter client quotas": b.request(quota_change, 1).entries[0].error_code,
        }


E = ErrorCode
EXPECTED_CODES = {
    "produce": (E.NONE, E.TOPIC_AUTHORIZATION_FAILED),
    "fetch": (E.NONE, E.TOPIC_AUTHORIZATION_FAILED),
    "join": (E.MEMBER_ID_REQUIRED, E.GROUP_AUTHORIZATION_FAILED),
    "commit": (E.NONE, E.GROUP_AUTHORIZATION_FAILED),
    "commit unauthorized topic": E.TOPIC_AUTHORIZATION_FAILED,
    "init transactional id": (E.NONE, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    "transactional produce": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    "plain produce with a transactional id": E.TOPIC_AUTHORIZATION_FAILED,
    "create topic": (E.NONE, E.TOPIC_AUTHORIZATION_FAILED),
    "create topic outside the prefix": E.TOPIC_AUTHORIZATION_FAILED,
    "delete topic": (E.TOPIC_AUTHORIZATION_FAILED, E.NONE),
    "describe topic configs": (E.NONE, E.TOPIC_AUTHORIZATION_FAILED),
    "describe broker configs": E.CLUSTER_AUTHORIZATION_FAILED,
    # WRITE implies DESCRIBE: alice sees the topic and its offsets; bob sees nothing of it.
    "list offsets": (E.NONE, E.TOPIC_AUTHORIZATION_FAILED),
    "metadata of all topics": (True, []),
    "metadata of a named topic": E.TOPIC_AUTHORIZATION_FAILED,
    "auto-create by metadata": True,
    "find group coordinator": E.GROUP_AUTHORIZATION_FAILED,
    "group authorized operations": (1 << AclOperation.READ.value) | (1 << AclOperation.DESCRIBE.value),
    "describe acls": E.CLUSTER_AUTHORIZATION_FAILED,
    "describe client quotas": E.CLUSTER_AUTHORIZATION_FAILED,
    "alter client quotas": E.CLUSTER_AUTHORIZATION_FAILED,
}


def test_two_principals_per_api(secured: tuple[BrokerProcess, Ports, AdminClient]) -> None:
    _, ports, admin = secured
    _grant_alice(admin)
    assert _codes_per_api(ports.address("SASL_PLAINTEXT")) == EXPECTED_CODES


@pytest.mark.slow
def test_apache_kafka_answers_the_same_codes(
    apache_kafka_factory: Callable[..., Any], tmp_path: Path
) -> None:
    """The control: Apache Kafka with the same listener, users, authorizer and ACLs."""
    from tests.apache_kafka import KafkaCluster, free_port

    sasl_port = free_port()
    cluster = KafkaCluster(tmp_path / "kafka", 1)
    node = cluster.nodes[0]
    node._properties.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
            f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "listener.security.protocol.map": ",".join(
                f"{name}:{'SASL_PLAINTEXT' if name.startswith('SASL') else 'PLAINTEXT'}"
                for name in ("PLAINTEXT", "CONTROLLER", "SASL_PLAINTEXT")
            ),
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "authorizer.class.name": AUTHZ_CONFIG["authorizer.class.name"],
            # The broker's own PLAINTEXT and CONTROLLER connections are ANONYMOUS.
            "super.users": "User:admin;User:ANONYMOUS",
            "num.partitions": 1,
        }
    )
    try:
        cluster.start()
        address = f"127.0.0.1:{sasl_port}"
        admin = AdminClient({**_sasl_at(address, "admin")})
        for future in admin.create_topics(_new_topics(TOPIC)).values():
            future.result(60)
        _grant_alice(admin)
        codes = _codes_per_api(address)
        assert {k: v for k, v in codes.items() if EXPECTED_CODES[k] != v} == {}
    finally:
        cluster.kill()


def test_deny_wins_and_acls_survive_a_restart(secured: tuple[BrokerProcess, Ports, AdminClient]) -> None:
    broker, ports, admin = secured
    _create_acls(
        admin,
        [
            _acl(ResourceType.TOPIC, "*", "User:alice", AclOperation.ALL),
            _acl(ResourceType.TOPIC, TOPIC, "User:alice", AclOperation.WRITE, allow=False),
        ],
    )
    with _client(ports, "alice") as a:
        assert _produce(a, TOPIC) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert _fetch(a, TOPIC) == ErrorCode.NONE
    broker.restart()
    admin = AdminClient(_sasl(ports, "admin"))
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    assert len(admin.describe_acls(everything).result(30)) == 2
    with _client(ports, "alice") as a:
        assert _produce(a, TOPIC) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert _fetch(a, TOPIC) == ErrorCode.NONE
    deleted = admin.delete_acls([everything])
    assert [len(f.result(30)) for f in deleted.values()] == [2]
    with _client(ports, "alice") as a:
        assert _fetch(a, TOPIC) == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_confluent_clients_see_the_authorization_errors(
    secured: tuple[BrokerProcess, Ports, AdminClient],
) -> None:
    _, ports, admin = secured
    _create_acls(
        admin,
        [
            _acl(ResourceType.TOPIC, TOPIC, "User:alice", AclOperation.ALL),
            _acl(ResourceType.GROUP, "*", "User:alice", AclOperation.READ),
        ],
    )
    delivered: list[KafkaError | None] = []
    for user in ("alice", "bob"):
        producer = Producer({**_sasl(ports, user), "retries": 0, "message.timeout.ms": 10000})
        producer.produce(TOPIC, b"x", on_delivery=lambda err, msg: delivered.append(err))
        producer.flush(30)
    assert delivered[0] is None and delivered[1] is not None
    assert delivered[1].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    consumer = Consumer({**_sasl(ports, "bob"), "group.id": "bob-group", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    try:
        errors = []
        for _ in range(30):
            msg = consumer.poll(1)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error().code())
                break
        assert errors and errors[0] in (
            KafkaError.GROUP_AUTHORIZATION_FAILED,
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
        )
    finally:
        consumer.close()


def test_super_user_and_allow_everyone_if_no_acl_found(multi_listener_broker: MultiBroker) -> None:
    _, ports = multi_listener_broker(
        ["SASL_PLAINTEXT"], {**AUTHZ_CONFIG, "allow.everyone.if.no.acl.found": True}
    )
    with _client(ports, "bob") as b:
        assert _create_topic(b, "free-for-all") == ErrorCode.NONE
        assert _produce(b, "free-for-all") == ErrorCode.NONE
    admin = AdminClient(_sasl(ports, "admin"))
    _create_acls(admin, [_acl(ResourceType.TOPIC, "free-for-all", "User:alice", AclOperation.READ)])
    with _client(ports, "bob") as b, _client(ports, "admin") as root:
        assert _produce(b, "free-for-all") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert _produce(root, "free-for-all") == ErrorCode.NONE


def test_acl_apis_without_an_authorizer_answer_security_disabled(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        described = client.request(
            DescribeAclsRequest(
                resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
            ),
            3,
        )
        assert described.error_code == ErrorCode.SECURITY_DISABLED
        topic = f"open-{uuid.uuid4().hex[:6]}"
        assert _create_topic(client, topic) == ErrorCode.NONE
        assert _produce(client, topic) == ErrorCode.NONE


def test_client_certificate_principal_is_the_subject_dn(
    multi_listener_broker: MultiBroker, certs: Certs
) -> None:
    config = {
        **certs.broker_ssl("required"),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:CN=admin",
        "num.partitions": 1,
    }
    _, ports = multi_listener_broker(["SSL"], config)

    def conf(name: str, org: str | None = None) -> dict[str, Any]:
        pem = certs.ca.issue(name, org=org)
        return {
            "bootstrap.servers": f"localhost:{ports['SSL']}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca.pem),
            "ssl.certificate.location": str(pem.cert),
            "ssl.key.location": str(pem.key),
        }

    admin = AdminClient(conf("admin"))
    for future in admin.create_topics(_new_topics(TOPIC)).values():
        future.result(30)
    _create_acls(admin, [_acl(ResourceType.TOPIC, TOPIC, "User:CN=alice,O=Test", AclOperation.WRITE)])
    outcomes: dict[str, KafkaError | None] = {}
    for name, client_conf in (("alice", conf("alice", org="Test")), ("bob", conf("bob", org="Test"))):
        producer = Producer({**client_conf, "retries": 0, "message.timeout.ms": 10000})
        producer.produce(TOPIC, b"x", on_delivery=lambda err, msg, name=name: outcomes.__setitem__(name, err))
        producer.flush(30)
    assert outcomes["alice"] is None
    bob = outcomes["bob"]
    assert bob is not None and bob.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
