"""AdminClient's SCRAM credentials (on Apache Kafka's session node) and ACLs (on a Kafka node with
the StandardAuthorizer), read back by confluent-kafka's AdminClient; on the reference broker
without an authorizer the ACL calls are SECURITY_DISABLED, as on Kafka (its secured listeners are
tested in tests/reference_broker/security)."""

from __future__ import annotations

from typing import Any

import confluent_kafka.admin as oracle_admin
import pytest

from sdk.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    AdminClient,
    PatternType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from sdk.errors import (
    DuplicateResourceError,
    ResourceNotFoundError,
    SecurityDisabledError,
)

from .conftest import Cluster


def oracle_scram(cluster: Cluster, users: list[str]) -> dict[str, set[tuple[int, int]]]:
    """user -> {(mechanism, iterations)} as librdkafka describes them (empty: none)."""
    oracle = cluster.oracle()
    futures = oracle.describe_user_scram_credentials(users)
    result = {}
    for user, future in futures.items():
        try:
            description = future.result(timeout=15)
        except Exception:
            result[user] = set()
            continue
        result[user] = {(int(i.mechanism.value), i.iterations) for i in description.scram_credential_infos}
    return result


@pytest.mark.apache_kafka
async def test_scram_credentials_set_described_and_deleted(apache_kafka: Any, name: Any) -> None:
    cluster = Cluster("apache", apache_kafka.bootstrap)
    alice, bob = name("alice"), name("bob")
    async with AdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        # Kafka takes one alteration per user and request: alice's two fail together, bob's holds.
        answers = await admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    alice, ScramMechanism.SCRAM_SHA_256, "secret-a", iterations=8192
                ),
                UserScramCredentialUpsertion(alice, "SCRAM-SHA-512", "secret-a2"),
                UserScramCredentialUpsertion(bob, ScramMechanism.SCRAM_SHA_512, "secret-b"),
            ]
        )
        assert isinstance(answers[alice], DuplicateResourceError) and answers[bob] is None
        for upsertion in (
            UserScramCredentialUpsertion(alice, ScramMechanism.SCRAM_SHA_256, "secret-a", iterations=8192),
            UserScramCredentialUpsertion(alice, "SCRAM-SHA-512", "secret-a2"),
        ):
            assert await admin.alter_user_scram_credentials([upsertion]) == {alice: None}
        assert oracle_scram(cluster, [alice, bob]) == {alice: {(1, 8192), (2, 4096)}, bob: {(2, 4096)}}

        missing = name("nobody")
        described = await admin.describe_user_scram_credentials([alice, missing])
        assert set(described[alice].credentials) == {
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
        }
        assert isinstance(described[missing].error, ResourceNotFoundError)
        assert bob in await admin.describe_user_scram_credentials()

        deleted = await admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(alice, ScramMechanism.SCRAM_SHA_256)]
        )
        assert deleted == {alice: None}
        assert oracle_scram(cluster, [alice]) == {alice: {(2, 4096)}}

    with pytest.raises(ValueError, match="iterations"):
        UserScramCredentialUpsertion("u", ScramMechanism.SCRAM_SHA_256, "p", iterations=10)
    with pytest.raises(ValueError, match="mechanism"):
        UserScramCredentialDeletion("u", "MD5")


@pytest.mark.apache_kafka
async def test_acls_created_described_and_deleted(apache_kafka_factory: Any, name: Any) -> None:
    node = apache_kafka_factory(
        **{
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
        }
    )
    cluster = Cluster("apache", node.bootstrap)
    topic = name("orders")
    read = AclBinding(
        AclResourceType.TOPIC,
        topic,
        PatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    write = AclBinding(
        AclResourceType.TOPIC,
        "pay-",
        PatternType.PREFIXED,
        "User:bob",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    async with AdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        assert await admin.create_acls([read, write]) == {read: None, write: None}
        oracle = cluster.oracle()
        everything = oracle_admin.AclBindingFilter(
            oracle_admin.ResourceType.ANY,
            None,
            oracle_admin.ResourcePatternType.ANY,
            None,
            None,
            oracle_admin.AclOperation.ANY,
            oracle_admin.AclPermissionType.ANY,
        )
        seen = oracle.describe_acls(everything).result(timeout=15)
        assert {(b.name, b.principal, b.operation.name, b.resource_pattern_type.name) for b in seen} == {
            (topic, "User:alice", "READ", "LITERAL"),
            ("pay-", "User:bob", "WRITE", "PREFIXED"),
        }

        assert await admin.describe_acls(AclBindingFilter(principal="User:alice")) == [read]
        matching = await admin.describe_acls(
            AclBindingFilter(AclResourceType.TOPIC, "pay-invoices", PatternType.MATCH)
        )
        assert matching == [write]

        bob_filter = AclBindingFilter(principal="User:bob")
        deleted = await admin.delete_acls([bob_filter])
        assert deleted[bob_filter].error is None and deleted[bob_filter].acls == (write,)
        left = oracle.describe_acls(everything).result(timeout=15)
        assert [(b.name, b.principal) for b in left] == [(topic, "User:alice")]

    with pytest.raises(ValueError, match="operation"):
        AclBinding(
            AclResourceType.TOPIC,
            "t",
            PatternType.LITERAL,
            "User:x",
            "*",
            AclOperation.ANY,
            AclPermissionType.ALLOW,
        )


async def test_acls_without_an_authorizer_are_security_disabled_as_on_kafka(broker: Any) -> None:
    """The reference broker serves the ACL APIs; without an authorizer (the embedded default, and
    Kafka's) they answer SECURITY_DISABLED, while SCRAM credentials need none."""
    async with AdminClient(bootstrap_servers=broker.bootstrap) as admin:
        with pytest.raises(SecurityDisabledError):
            await admin.describe_acls(AclBindingFilter())
        binding = AclBinding(
            AclResourceType.TOPIC,
            "t",
            PatternType.LITERAL,
            "User:x",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        assert isinstance((await admin.create_acls([binding]))[binding], SecurityDisabledError)
        assert isinstance(await admin.describe_user_scram_credentials(), dict)


@pytest.fixture
def scram_node(tmp_path: Any) -> Any:
    """A Kafka node with a SASL_PLAINTEXT listener taking SCRAM logins (``.scram_bootstrap``)
    beside its PLAINTEXT one."""
    from tests.apache_kafka import KafkaCluster, free_port, require_apache_kafka

    require_apache_kafka()
    cluster = KafkaCluster(tmp_path / "kafka", 1)
    node = cluster.nodes[0]
    sasl_port = free_port()
    node._properties.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
            f"SASL://127.0.0.1:{sasl_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port},SASL://127.0.0.1:{sasl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            **{
                f"listener.name.sasl.{mechanism}.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
                for mechanism in ("scram-sha-256", "scram-sha-512")
            },
        }
    )
    node.scram_bootstrap = f"127.0.0.1:{sasl_port}"
    try:
        cluster.start()
        yield node
    finally:
        cluster.kill()


def scram_login(bootstrap: str, mechanism: str, user: str, password: str) -> bool:
    """Whether librdkafka logs in with these credentials (and then reads the metadata)."""
    client = oracle_admin.AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "log_level": 0,
        }
    )
    try:
        client.list_topics(timeout=8)
    except Exception:
        return False
    return True


@pytest.mark.apache_kafka
async def test_a_scram_credential_set_by_the_admin_client_logs_in(scram_node: Any) -> None:
    async with AdminClient(bootstrap_servers=scram_node.bootstrap) as admin:
        answers = await admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "carol", ScramMechanism.SCRAM_SHA_256, "c-secret", iterations=4096
                ),
                UserScramCredentialUpsertion(
                    "dave", ScramMechanism.SCRAM_SHA_512, "d-secret", iterations=5000
                ),
            ]
        )
        assert answers == {"carol": None, "dave": None}
    assert scram_login(scram_node.scram_bootstrap, "SCRAM-SHA-256", "carol", "c-secret")
    assert scram_login(scram_node.scram_bootstrap, "SCRAM-SHA-512", "dave", "d-secret")
    assert not scram_login(scram_node.scram_bootstrap, "SCRAM-SHA-256", "carol", "wrong")
