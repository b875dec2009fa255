"""``topicwright acls`` and ``users`` on Apache Kafka (an authorizer, and a SCRAM listener): ACLs
read back by confluent-kafka's AdminClient, a SCRAM credential set by the tool used to log in with
``--command-config`` (Kafka's properties), and a wrong password refused in one line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka.admin as oracle_admin
import pytest

from .conftest import Cli

pytestmark = pytest.mark.apache_kafka


def oracle_acls(bootstrap: str) -> set[tuple[str, str, str, str, str]]:
    """(resource name, pattern type, principal, operation, permission) of every ACL, as librdkafka
    reads them."""
    client = oracle_admin.AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    everything = oracle_admin.AclBindingFilter(
        oracle_admin.ResourceType.ANY,
        None,
        oracle_admin.ResourcePatternType.ANY,
        None,
        None,
        oracle_admin.AclOperation.ANY,
        oracle_admin.AclPermissionType.ANY,
    )
    return {
        (b.name, b.resource_pattern_type.name, b.principal, b.operation.name, b.permission_type.name)
        for b in client.describe_acls(everything).result(timeout=15)
    }


def test_acls_created_listed_and_deleted(apache_kafka_factory: Any, name: Any) -> None:
    node = apache_kafka_factory(
        **{
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
        }
    )
    cli, topic = Cli(node.bootstrap), name("orders")
    created = cli(
        "acls", "create", "--resource-type", "topic", "--resource-name", topic,
        "--principal", "User:alice", "--operation", "read", "--json",
    ).json()  # fmt: skip
    assert created == [
        {
            "resource_type": "TOPIC",
            "resource_name": topic,
            "pattern_type": "LITERAL",
            "principal": "User:alice",
            "host": "*",
            "operation": "READ",
            "permission": "ALLOW",
        }
    ]
    cli(
        "acls", "create", "--resource-type", "topic", "--resource-name", "pay-", "--pattern-type", "prefixed",
        "--principal", "User:bob", "--operation", "write", "--permission", "deny",
    )  # fmt: skip
    assert oracle_acls(node.bootstrap) == {
        (topic, "LITERAL", "User:alice", "READ", "ALLOW"),
        ("pay-", "PREFIXED", "User:bob", "WRITE", "DENY"),
    }
    table = cli("acls", "list").table()
    assert {(r["RESOURCE-NAME"], r["PRINCIPAL"], r["OPERATION"]) for r in table} == {
        (topic, "User:alice", "READ"),
        ("pay-", "User:bob", "WRITE"),
    }
    matching = cli(
        "acls", "list", "--resource-type", "topic", "--resource-name", "pay-in", "--pattern-type", "match"
    )
    assert [r["PRINCIPAL"] for r in matching.table()] == ["User:bob"]

    deleted = cli("acls", "delete", "--principal", "User:bob", "--json").json()
    assert [d["resource_name"] for d in deleted] == ["pay-"]
    assert oracle_acls(node.bootstrap) == {(topic, "LITERAL", "User:alice", "READ", "ALLOW")}
    everything = cli("acls", "delete", check=False)
    assert everything.returncode == 2 and "at least one field" in everything.stderr
    bad = cli("acls", "create", "--resource-type", "topic", "--resource-name", "t", "--principal", "User:x",
              "--operation", "fly", check=False)  # fmt: skip
    assert bad.returncode == 2 and "invalid choice: 'fly'" in bad.stderr


@pytest.fixture
def scram_node(tmp_path: Path) -> Iterator[Any]:
    """A Kafka node with a SASL_PLAINTEXT listener taking SCRAM logins (``.scram_bootstrap``)."""
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


def scram_config(tmp_path: Path, user: str, password: str) -> str:
    path = tmp_path / f"{user}-{len(password)}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="{user}" password="{password}";\n'
    )
    return str(path)


def test_scram_user_set_by_the_tool_logs_in_through_command_config(scram_node: Any, tmp_path: Path) -> None:
    cli = Cli(scram_node.bootstrap)
    altered = cli(
        "users", "alter", "--user", "carol", "--mechanism", "SCRAM-SHA-256", "--password-stdin",
        "--iterations", "8192", stdin="c-secret\n",
    )  # fmt: skip
    assert altered.stdout.strip() == "Set carol's SCRAM-SHA-256 credential (8192 iterations)."
    cli("users", "alter", "--user", "carol", "--mechanism", "scram-sha-512", "--password", "other")
    described = cli("users", "describe", "--user", "carol", "--json").json()
    assert described == [
        {"user": "carol", "mechanism": "SCRAM-SHA-256", "iterations": 8192},
        {"user": "carol", "mechanism": "SCRAM-SHA-512", "iterations": 4096},
    ]

    through_sasl = Cli(scram_node.scram_bootstrap)
    topics = through_sasl(
        "topics", "list", "--json", "--command-config", scram_config(tmp_path, "carol", "c-secret")
    )
    assert isinstance(topics.json(), list)
    refused = through_sasl(
        "topics", "list", "--command-config", scram_config(tmp_path, "carol", "wrong"), check=False
    )
    assert refused.returncode != 0 and len(refused.stderr.splitlines()) == 1, str(refused)
    assert "Traceback" not in refused.stderr and "authentication" in refused.stderr.lower()

    cli("users", "delete", "--user", "carol", "--mechanism", "SCRAM-SHA-512")
    assert [d["mechanism"] for d in cli("users", "describe", "--user", "carol", "--json").json()] == [
        "SCRAM-SHA-256"
    ]
    cli("users", "delete", "--user", "carol", "--mechanism", "SCRAM-SHA-256")
    gone = cli("users", "describe", "--user", "carol", check=False)
    assert gone.returncode == 1 and "has no SCRAM credentials" in gone.stderr
    weak = cli("users", "alter", "--user", "dave", "--mechanism", "SCRAM-SHA-256", "--password", "x",
               "--iterations", "10", check=False)  # fmt: skip
    assert weak.returncode == 2 and "iterations" in weak.stderr
