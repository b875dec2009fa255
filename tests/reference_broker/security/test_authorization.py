"""ACL authorization with Kafka's model on a broker with ``authorizer.class.name``: two SASL
principals, one granted and one not, per API (produce, fetch, group join and commit,
transactional id, create/delete topic, describe configs); deny wins over allow; implied
operations; Metadata hides what may not be described; super users; ACLs survive a restart;
CreateAcls/DescribeAcls/DeleteAcls through confluent-kafka's admin client."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
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
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
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
    return {
        "bootstrap.servers": ports.address("SASL_PLAINTEXT"),
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
    client = WireClient(ports.address("SASL_PLAINTEXT"))
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


def test_two_principals_per_api(secured: tuple[BrokerProcess, Ports, AdminClient]) -> None:
    _, ports, admin = secured
    alice = "User:alice"
    _create_acls(
        admin,
        [
            _acl(ResourceType.TOPIC, TOPIC, alice, AclOperation.WRITE),
            _acl(ResourceType.TOPIC, TOPIC, alice, AclOperation.READ),
            _acl(
                ResourceType.GROUP, "alice-", alice, AclOperation.READ, pattern=ResourcePatternType.PREFIXED
            ),
            _acl(ResourceType.TRANSACTIONAL_ID, "alice-tx", alice, AclOperation.WRITE),
            _acl(ResourceType.TOPIC, "alice-", alice, AclOperation.ALL, pattern=ResourcePatternType.PREFIXED),
            _acl(ResourceType.TOPIC, TOPIC, alice, AclOperation.DESCRIBE_CONFIGS),
        ],
    )
    E = ErrorCode
    with _client(ports, "alice") as a, _client(ports, "bob") as b:
        assert (_produce(a, TOPIC), _produce(b, TOPIC)) == (E.NONE, E.TOPIC_AUTHORIZATION_FAILED)
        assert (_fetch(a, TOPIC), _fetch(b, TOPIC)) == (E.NONE, E.TOPIC_AUTHORIZATION_FAILED)
        assert (_join(a, "alice-group"), _join(b, "alice-group")) == (
            E.MEMBER_ID_REQUIRED,
            E.GROUP_AUTHORIZATION_FAILED,
        )
        assert _commit(a, "alice-group", TOPIC) == E.NONE
        assert _commit(b, "alice-group", TOPIC) == E.GROUP_AUTHORIZATION_FAILED
        assert _commit(a, "alice-group", "someone-elses") == E.TOPIC_AUTHORIZATION_FAILED
        assert (_init_txn(a, "alice-tx"), _init_txn(b, "alice-tx")) == (
            E.NONE,
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        )
        assert _produce(b, TOPIC, transactional_id="alice-tx") == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        # Only a transactional batch needs the transactional id (Kafka's hasTransactionalRecords).
        assert _produce(b, TOPIC, "alice-tx", transactional_batch=False) == E.TOPIC_AUTHORIZATION_FAILED
        assert (_create_topic(a, "alice-new"), _create_topic(b, "alice-new2")) == (
            E.NONE,
            E.TOPIC_AUTHORIZATION_FAILED,
        )
        assert _create_topic(a, "bob-new") == E.TOPIC_AUTHORIZATION_FAILED
        assert (_delete_topic(b, "alice-new"), _delete_topic(a, "alice-new")) == (
            E.TOPIC_AUTHORIZATION_FAILED,
            E.NONE,
        )
        assert (_describe_configs(a, 2, TOPIC), _describe_configs(b, 2, TOPIC)) == (
            E.NONE,
            E.TOPIC_AUTHORIZATION_FAILED,
        )
        assert _describe_configs(a, 4, "1") == E.CLUSTER_AUTHORIZATION_FAILED
        # WRITE implies DESCRIBE: alice sees the topic and its offsets; bob sees nothing of it.
        listed = ListOffsetsRequest(
            replica_id=-1,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=TOPIC,
                    partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)],
                )
            ],
        )
        assert a.request(listed, 5).topics[0].partitions[0].error_code == E.NONE
        assert b.request(listed, 5).topics[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
        assert TOPIC in {t.name for t in a.request(MetadataRequest(topics=None), 12).topics}
        assert b.request(MetadataRequest(topics=None), 12).topics == []
        named = b.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 12)
        assert named.topics[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
        # Auto-creation needs CREATE.
        auto = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="alice-auto")], allow_auto_topic_creation=True
        )
        assert a.request(auto, 12).topics[0].error_code == E.NONE
        found = b.request(
            FindCoordinatorRequest(key_type=0, coordinator_keys=["alice-group"]), 4
        ).coordinators[0]
        assert found.error_code == E.GROUP_AUTHORIZATION_FAILED
        described = a.request(
            DescribeGroupsRequest(groups=["alice-group"], include_authorized_operations=True), 5
        )
        assert described.groups[0].authorized_operations == (1 << 3) | (
            1 << 8
        )  # READ (and DESCRIBE it implies)
        assert (
            b.request(
                DescribeAclsRequest(
                    resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
                ),
                3,
            ).error_code
            == E.CLUSTER_AUTHORIZATION_FAILED
        )


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
