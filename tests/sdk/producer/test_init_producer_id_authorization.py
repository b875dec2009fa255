"""A producer refused its producer id for lack of rights (InitProducerId answering
CLUSTER_AUTHORIZATION_FAILED or TRANSACTIONAL_ID_AUTHORIZATION_FAILED) or for a failed SASL login
fails at once, as Java's producer does, instead of asking again until its timeouts run out: another
attempt would get the same answer. Checked on our broker with an ACL authorizer and SASL/PLAIN
users (``admin`` a super user, ``bob`` granted nothing unless a test says so)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from reference_broker.testing import BrokerFactory
from sdk import Producer
from sdk.errors import (
    AuthenticationError,
    ClusterAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from tests.reference_broker.security.conftest import PLAIN_JAAS, free_port

#: Far longer than a refused request takes: a producer still working when it ends is retrying.
FAIL_FAST_S = 10.0
AUTHZ_CONFIG = {
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
    "num.partitions": 1,
}


def _sasl(address: str, user: str, password: str | None = None) -> dict[str, Any]:
    return {
        "bootstrap_servers": address,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": password if password is not None else f"{user}-pw",
    }


@pytest.fixture
def secured(broker_factory: BrokerFactory) -> Iterator[tuple[str, AdminClient, str]]:
    """(SASL address, confluent-kafka admin client as ``admin``, a topic bob may describe)."""
    address = f"127.0.0.1:{free_port()}"
    broker_factory({"listeners": f"SASL_PLAINTEXT://{address}", **AUTHZ_CONFIG})
    admin = AdminClient(
        {
            "bootstrap.servers": address,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": "admin-pw",
        }
    )
    topic = f"refused-{uuid.uuid4().hex[:8]}"
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(30)
    _allow(admin, ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
    yield address, admin, topic


def _allow(admin: AdminClient, resource: ResourceType, name: str, operation: AclOperation) -> None:
    binding = AclBinding(
        resource, name, ResourcePatternType.LITERAL, "User:bob", "*", operation, AclPermissionType.ALLOW
    )
    for future in admin.create_acls([binding]).values():
        future.result(30)


async def test_idempotent_producer_without_idempotent_write_fails_its_records_at_once(
    secured: tuple[str, AdminClient, str],
) -> None:
    address, _, topic = secured
    settings = {**_sasl(address, "bob"), "enable_idempotence": True, "delivery_timeout_ms": 120_000}
    async with Producer(**settings) as producer:
        started = time.monotonic()
        with pytest.raises(ClusterAuthorizationFailedError):
            # The refusal may come before the send (the id is asked for at start) or as its outcome.
            await asyncio.wait_for(await producer.send(topic, b"refused"), FAIL_FAST_S)
        assert time.monotonic() - started < FAIL_FAST_S


async def test_transactional_producer_without_its_transactional_id_fails_init_at_once(
    secured: tuple[str, AdminClient, str],
) -> None:
    address, admin, topic = secured
    transactional_id = f"refused-{uuid.uuid4().hex[:8]}"
    _allow(admin, ResourceType.TOPIC, topic, AclOperation.WRITE)
    # DESCRIBE lets FindCoordinator answer; InitProducerId needs WRITE, which bob lacks.
    _allow(admin, ResourceType.TRANSACTIONAL_ID, transactional_id, AclOperation.DESCRIBE)
    producer = Producer(**_sasl(address, "bob"), transactional_id=transactional_id)
    with pytest.raises(TransactionalIdAuthorizationFailedError, match="InitProducerId"):
        await asyncio.wait_for(producer.start(), FAIL_FAST_S)  # start() initializes the transactions
    await asyncio.wait_for(producer.stop(), FAIL_FAST_S)


async def test_producer_with_a_wrong_password_fails_at_once(secured: tuple[str, AdminClient, str]) -> None:
    address, _, topic = secured
    producer = Producer(**_sasl(address, "bob", "wrong-pw"), enable_idempotence=True)

    async def produce_one() -> None:
        await producer.start()
        try:
            await (await producer.send(topic, b"refused"))
        finally:
            await producer.stop()

    with pytest.raises(AuthenticationError):
        await asyncio.wait_for(produce_one(), FAIL_FAST_S)


#: Users of the listener the producer's later connections reach: bob is not one of them.
_JAAS_WITHOUT_BOB = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' username="admin" password="admin-pw" user_admin="admin-pw";'
)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def test_a_refused_login_while_asking_for_the_producer_id_is_fatal(
    broker_factory: BrokerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The bootstrap connection logs bob in; every later one (InitProducerId's) reaches a listener
    that does not know bob. Java's producer treats that AuthenticationException as fatal; asking
    again would only be refused again."""
    caplog.set_level(logging.ERROR, logger="sdk.producer.sender")
    known, unknown, front = free_port(), free_port(), free_port()
    broker_factory(
        {
            "listeners": f"KNOWN://127.0.0.1:{known},UNKNOWN://127.0.0.1:{unknown}",
            # Clients are told to come back through the front door below.
            "advertised.listeners": f"KNOWN://127.0.0.1:{front},UNKNOWN://127.0.0.1:{unknown}",
            "listener.security.protocol.map": "KNOWN:SASL_PLAINTEXT,UNKNOWN:SASL_PLAINTEXT",
            "inter.broker.listener.name": "UNKNOWN",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.known.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.unknown.plain.sasl.jaas.config": _JAAS_WITHOUT_BOB,
        }
    )
    connections = 0

    async def front_door(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        port = known if connections == 1 else unknown
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    server = await asyncio.start_server(front_door, "127.0.0.1", front)
    try:
        producer = Producer(**_sasl(f"127.0.0.1:{front}", "bob"), enable_idempotence=True)
        await producer.start()
        try:
            deadline = time.monotonic() + FAIL_FAST_S
            while "cannot get a producer id" not in caplog.text:
                assert time.monotonic() < deadline, f"still asking after {connections} connections"
                await asyncio.sleep(0.05)
            assert "SaslAuthenticationError" in caplog.text
            with pytest.raises(AuthenticationError):
                await producer.send("any-topic", b"refused")  # the producer is failed for good
        finally:
            await asyncio.wait_for(producer.stop(), FAIL_FAST_S)
    finally:
        server.close()
