"""Security between the nodes of a cluster: TLS and SASL on the inter-broker and controller
listeners, as Kafka secures them (``reference_broker.cluster.inter_broker``).

Real three-node clusters (``ClusterProcess``) whose clients use a PLAINTEXT listener while the
nodes talk to each other over an ``INTERNAL`` listener (SSL or SASL_SSL) and over the controller
listener secured the same way, with certificates made here by ``cryptography`` (one certificate
for every node, valid for the nodes' addresses 127.0.1.N). What must hold: acks=all and
transactional produce/consume work through such a cluster; a node whose inter-broker password is
wrong is refused (never let in over plaintext) and stays out of the ISR with the refusal in its
log; a certificate that does not name the node's address is refused by host name verification;
contradictory settings stop a node at start with Kafka's message.
"""

from __future__ import annotations

import datetime
import ipaddress
import uuid
from pathlib import Path
from typing import Any

import pytest

from reference_broker.testing import ClusterProcess, ClusterStartError, wait_until
from tests.reference_broker.security.certs import CertificateAuthority

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.slow]

NODES = 3
BROKER_PASSWORD = "broker-secret"
REPLICATED: dict[str, Any] = {
    "default.replication.factor": NODES,
    "offsets.topic.replication.factor": NODES,
    "offsets.topic.num.partitions": 2,
    "transaction.state.log.replication.factor": NODES,
    "transaction.state.log.min.isr": 2,
    "transaction.state.log.num.partitions": 2,
    "min.insync.replicas": NODES,
    "replica.lag.time.max.ms": 3000,
    "group.initial.rebalance.delay.ms": 0,
}


def node_certificate(directory: Path, *, addresses: list[str]) -> tuple[Path, Path]:
    """(CA file, keystore file): one node certificate, ``CN=broker``, naming ``addresses``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca = CertificateAuthority(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "broker")]))
        .issuer_name(ca.name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    keystore = directory / "node.keystore.pem"
    keystore.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption())
        + cert.public_bytes(serialization.Encoding.PEM)
    )
    return ca.pem, keystore


NODE_ADDRESSES = [f"127.0.1.{n}" for n in range(1, NODES + 1)]


def tls_settings(ca: Path, keystore: Path) -> dict[str, Any]:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca),
        "ssl.client.auth": "required",
    }


def plain_jaas(password: str) -> str:
    """The listener's PLAIN entry: the node logs in as ``broker`` with ``password`` and accepts
    ``broker`` with the right one."""
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
        f' username="broker" password="{password}" user_broker="{BROKER_PASSWORD}";'
    )


def ssl_cluster_config(ca: Path, keystore: Path) -> dict[str, Any]:
    return {
        **REPLICATED,
        **tls_settings(ca, keystore),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL,INTERNAL:SSL",
        "inter.broker.listener.name": "INTERNAL",
    }


def sasl_ssl_cluster_config(ca: Path, keystore: Path, password: str = BROKER_PASSWORD) -> dict[str, Any]:
    return {
        **REPLICATED,
        **tls_settings(ca, keystore),
        "ssl.client.auth": "none",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": plain_jaas(password),
        "listener.name.controller.plain.sasl.jaas.config": plain_jaas(BROKER_PASSWORD),
    }


def with_authorizer(config: dict[str, Any], super_users: str) -> dict[str, Any]:
    """``config`` with Kafka's StandardAuthorizer and no access without an ACL but for
    ``super_users`` (clients come in on the PLAINTEXT listener as User:ANONYMOUS)."""
    return {
        **config,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": False,
        "super.users": super_users,
    }


def node_logs(data_dir: Path) -> str:
    return "".join(path.read_text() for path in sorted(data_dir.glob("node-*.log")))


def create_topic(bootstrap: str, topic: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, NODES)])[topic].result(timeout=30)


def full_isr(cluster: ClusterProcess, topic: str, partitions: int = 2) -> bool:
    for index in range(partitions):
        part = cluster.partition(topic, index)
        if part is None or part.leader_id < 0 or set(part.isr_nodes) != set(range(1, NODES + 1)):
            return False
    return True


def consume(bootstrap: str, topic: str, count: int, **config: Any) -> list[bytes]:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"g-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **config,
    })
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        wait_until(lambda: _poll_into(consumer, values) >= count, f"{count} records of {topic}", 60)
    finally:
        consumer.close()
    return values


def _poll_into(consumer: Any, values: list[bytes]) -> int:
    message = consumer.poll(0.5)
    if message is not None and message.error() is None:
        values.append(message.value())
    return len(values)


def test_ssl_between_nodes_carries_acks_all_produce(tmp_path: Path) -> None:
    """Raft, registration and replica fetches run over TLS with client certificates; an acks=all
    produce to an RF=3, min.insync.replicas=3 topic needs every follower to fetch over it."""
    ca, keystore = node_certificate(tmp_path / "certs", addresses=NODE_ADDRESSES)
    with ClusterProcess(NODES, ssl_cluster_config(ca, keystore), extra_listeners={"INTERNAL": "SSL"},
                        data_dir=tmp_path / "data") as cluster:
        topic = "over-tls"
        create_topic(cluster.bootstrap, topic)
        cluster.wait_for(lambda: full_isr(cluster, topic), "every replica in sync over TLS")
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                             "enable.idempotence": True})
        errors: list[Any] = []
        for i in range(50):
            producer.produce(topic, f"v{i}".encode(), key=str(i % 2).encode(),
                             on_delivery=lambda err, _msg: errors.append(err) if err else None)
        assert producer.flush(60) == 0
        assert errors == []
        values = consume(cluster.bootstrap, topic, 50)
        assert sorted(values) == sorted(f"v{i}".encode() for i in range(50))


def test_sasl_ssl_between_nodes_carries_transactions(tmp_path: Path) -> None:
    """SASL/PLAIN over TLS on the inter-broker and controller listeners: a transactional
    producer's committed records reach a read_committed consumer, the aborted ones do not (the
    markers and the transaction log are replicated over the SASL_SSL listener). An authorizer is
    on: the nodes' principal, User:broker, is a super user, so it has CLUSTER_ACTION."""
    ca, keystore = node_certificate(tmp_path / "certs", addresses=NODE_ADDRESSES)
    config = with_authorizer(sasl_ssl_cluster_config(ca, keystore), "User:broker;User:ANONYMOUS")
    with ClusterProcess(NODES, config,
                        extra_listeners={"INTERNAL": "SASL_SSL"}, data_dir=tmp_path / "data") as cluster:
        topic = "over-sasl-ssl"
        create_topic(cluster.bootstrap, topic)
        cluster.wait_for(lambda: full_isr(cluster, topic), "every replica in sync over SASL_SSL")
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap,
                                             "transactional.id": "secure-txn"})
        producer.init_transactions(60)
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, f"aborted-{i}".encode(), partition=i % 2)
        producer.abort_transaction(60)
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, f"committed-{i}".encode(), partition=i % 2)
        producer.commit_transaction(60)
        values = consume(cluster.bootstrap, topic, 10, **{"isolation.level": "read_committed"})
        assert sorted(values) == sorted(f"committed-{i}".encode() for i in range(10))


def test_wrong_inter_broker_password_is_refused_and_the_node_leaves_the_isr(tmp_path: Path) -> None:
    """Node 3 restarted with a wrong password on the inter-broker listener: the leaders refuse
    its fetches (no plaintext fallback), it drops out of the ISR while still registered (its
    controller credentials are right), and its log names the refusal."""
    ca, keystore = node_certificate(tmp_path / "certs", addresses=NODE_ADDRESSES)
    with ClusterProcess(NODES, sasl_ssl_cluster_config(ca, keystore),
                        extra_listeners={"INTERNAL": "SASL_SSL"}, data_dir=tmp_path / "data") as cluster:
        topic = "refused-follower"
        create_topic(cluster.bootstrap, topic)
        cluster.wait_for(lambda: full_isr(cluster, topic), "every replica in sync")
        node = cluster.node(3)
        cluster.stop(3)
        node.process.config["listener.name.internal.plain.sasl.jaas.config"] = plain_jaas("wrong")
        cluster.start_node(3)
        cluster.wait_for(lambda: "Invalid username or password" in node.log_tail(400),
                         "node 3 logs the refused inter-broker login", 60)

        def refused_but_registered() -> bool:
            parts = [cluster.partition(topic, i, via=1) for i in range(2)]
            return (
                3 in cluster.registered_brokers(via=1)
                and all(p is not None and 3 not in p.isr_nodes for p in parts)
            )

        cluster.wait_for(refused_but_registered, "node 3 registered but out of every ISR", 60)


def test_host_name_verification_refuses_a_certificate_for_other_addresses(tmp_path: Path) -> None:
    """ssl.endpoint.identification.algorithm=https (Kafka's default): the nodes' certificate
    names only 127.0.0.1, so no node accepts another's and the cluster never forms; the logs say
    why."""
    ca, keystore = node_certificate(tmp_path / "certs", addresses=["127.0.0.1"])
    cluster = ClusterProcess(NODES, ssl_cluster_config(ca, keystore), extra_listeners={"INTERNAL": "SSL"},
                             data_dir=tmp_path / "data", start_timeout=20)
    with pytest.raises(ClusterStartError):
        cluster.start()
    assert "certificate verify failed: IP address mismatch" in node_logs(tmp_path / "data")


def test_inter_broker_principal_without_cluster_action_is_refused(tmp_path: Path) -> None:
    """With an authorizer and the nodes' principal (User:broker) neither a super user nor granted
    CLUSTER_ACTION, the controllers refuse the nodes' Vote and registration requests as Kafka's
    ControllerApis does: the cluster never forms, and the nodes' logs say which permission the
    principal lacks."""
    ca, keystore = node_certificate(tmp_path / "certs", addresses=NODE_ADDRESSES)
    config = with_authorizer(sasl_ssl_cluster_config(ca, keystore), "User:ANONYMOUS")
    cluster = ClusterProcess(NODES, config, extra_listeners={"INTERNAL": "SASL_SSL"},
                             data_dir=tmp_path / "data", start_timeout=20)
    with pytest.raises(ClusterStartError):
        cluster.start()
    assert "needs CLUSTER_ACTION on the cluster" in node_logs(tmp_path / "data")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"security.inter.broker.protocol": "PLAINTEXT", "inter.broker.listener.name": "PLAINTEXT"},
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.",
        ),
        (
            {"inter.broker.listener.name": "CONTROLLER"},
            "inter.broker.listener.name must be a listener name defined in advertised.listeners.",
        ),
        (
            {"listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
             "sasl.enabled.mechanisms": "PLAIN",
             "listener.name.plaintext.plain.sasl.jaas.config": plain_jaas(BROKER_PASSWORD),
             "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
            "sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when SASL"
            " is used for inter-broker communication",
        ),
        (
            {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
             "sasl.enabled.mechanisms": "PLAIN",
             "sasl.mechanism.controller.protocol": "PLAIN",
             "listener.name.controller.plain.sasl.jaas.config":
                 'org.apache.kafka.common.security.plain.PlainLoginModule required user_broker="pw";'},
            'listener.name.controller.plain.sasl.jaas.config: PLAIN between nodes needs username="..."',
        ),
        (
            {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
             "ssl.keystore.type": "PEM", "ssl.keystore.location": "{keystore}",
             "ssl.endpoint.identification.algorithm": "ldap"},
            "ssl.endpoint.identification.algorithm: 'ldap' is not supported",
        ),
    ],
    ids=["both-inter-broker-settings", "controller-as-inter-broker", "mechanism-not-enabled",
         "no-client-credentials", "unknown-endpoint-identification"],
)
def test_contradictory_settings_stop_the_node_at_start(tmp_path: Path, settings: dict[str, Any],
                                                      message: str) -> None:
    _, keystore = node_certificate(tmp_path / "certs", addresses=NODE_ADDRESSES)
    settings = {k: str(v).replace("{keystore}", str(keystore)) for k, v in settings.items()}
    cluster = ClusterProcess(1, settings, data_dir=tmp_path / "data", start_timeout=30)
    with pytest.raises(ClusterStartError) as failure:
        cluster.start()
    assert message in str(failure.value)


def test_single_node_security_stores_stop_a_cluster_node_naming_the_file(tmp_path: Path) -> None:
    """A single-node broker's ACLs, SCRAM credentials and client quotas (files in its data dir)
    would be ignored by a cluster node, which keeps them in the metadata log: the node refuses to
    start, naming each file in turn and the way forward, and starts once they are moved away."""
    import hashlib
    import os

    from reference_broker.testing import BrokerProcess
    from sdk.protocol.messages import (
        AlterClientQuotasRequest,
        AlterUserScramCredentialsRequest,
        CreateAclsRequest,
    )
    from tests.reference_broker.wire import WireClient

    node_dir = tmp_path / "data" / "node-1"
    single = with_authorizer({}, "User:ANONYMOUS")
    with BrokerProcess(node_dir, single) as broker, WireClient(broker.bootstrap) as client:
        acl = CreateAclsRequest.AclCreation(resource_type=2, resource_name="orders", resource_pattern_type=3,
                                            principal="User:alice", host="*", operation=3, permission_type=3)
        assert [r.error_code for r in client.request(CreateAclsRequest(creations=[acl]), 3).results] == [0]
        salt = os.urandom(16)
        upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
            name="alice", mechanism=1, iterations=4096, salt=salt,
            salted_password=hashlib.pbkdf2_hmac("sha256", b"alice-pw", salt, 4096))
        answer = client.request(AlterUserScramCredentialsRequest(deletions=[], upsertions=[upsertion]), 0)
        assert [r.error_code for r in answer.results] == [0]
        Entry = AlterClientQuotasRequest.EntryData
        quota = Entry(entity=[Entry.EntityData(entity_type="user", entity_name="alice")],
                      ops=[Entry.OpData(key="producer_byte_rate", value=1024.0, remove=False)])
        answer = client.request(AlterClientQuotasRequest(entries=[quota]), 1)
        assert [e.error_code for e in answer.entries] == [0]
    stores = [node_dir / ".security" / "acls.json", node_dir / ".security" / "scram-credentials.json",
              node_dir / "client-quotas.json"]
    assert all(path.exists() for path in stores)

    moved = tmp_path / "moved"
    moved.mkdir()
    for path in stores:
        cluster = ClusterProcess(1, with_authorizer({}, "User:ANONYMOUS"), data_dir=tmp_path / "data",
                                 start_timeout=30)
        with pytest.raises(ClusterStartError) as failure:
            cluster.start()
        cluster.close()
        assert f"{path} holds the" in str(failure.value)
        assert "move the file out of" in str(failure.value)
        path.rename(moved / path.name)
    with ClusterProcess(1, with_authorizer({}, "User:ANONYMOUS"), data_dir=tmp_path / "data") as cluster:
        assert cluster.registered_brokers(via=1) == {1}
