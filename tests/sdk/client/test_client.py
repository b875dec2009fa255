"""KafkaClient: bootstrap, connection per broker, reconnects, metadata refresh."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from sdk.client import KafkaClient, parse_bootstrap_servers
from sdk.client.backoff import ExponentialBackoff
from sdk.client.config import ClientConfig
from sdk.client.sasl import create_mechanism
from sdk.errors import ConfigError, KafkaConnectionError, NoBrokersAvailableError
from sdk.producer.config import ProducerConfig
from sdk.protocol import messages

#: How long a condition may take to hold on a loaded runner; only a failing test waits it out.
WAIT_S = 10.0


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        await asyncio.sleep(0.01)


async def test_bootstrap_and_topic_metadata(mock_cluster, topic_name):
    client = KafkaClient(mock_cluster.bootstrap)
    await client.start()
    try:
        assert sorted(client.cluster.brokers) == [b[0] for b in mock_cluster.brokers]
        await client.add_topic(topic_name)
        topic = client.cluster.topic(topic_name)
        assert topic is not None and topic.partition_ids == (0, 1, 2, 3)
        leaders = {client.cluster.leader_for(topic_name, p) for p in topic.partition_ids}
        assert leaders <= set(client.cluster.brokers)
        for node_id in client.cluster.brokers:
            conn = await client.get_connection(node_id)
            assert conn is await client.get_connection(node_id)  # one connection per broker
    finally:
        await client.close()


async def test_bootstrap_skips_dead_addresses(mock_cluster):
    client = KafkaClient(f"127.0.0.1:1,{mock_cluster.bootstrap}", connect_timeout_ms=500)
    await client.start()
    await client.close()


async def test_no_brokers_available():
    client = KafkaClient("127.0.0.1:1,127.0.0.1:2", connect_timeout_ms=300)
    with pytest.raises(NoBrokersAvailableError, match=r"127\.0\.0\.1:1"):
        await client.start()


async def test_reconnects_after_the_connection_is_cut(mock_cluster, proxy_factory):
    proxy = await proxy_factory(mock_cluster.bootstrap)
    client = KafkaClient(proxy.bootstrap, reconnect_backoff_ms=20)
    await client.start()
    try:
        node = next(iter(client.cluster.brokers))
        first = await client.get_connection(node)
        version = client.cluster.version
        proxy.cut_all()
        await _until(lambda: first.closed, "the cut connection is seen closed")
        response = await client.send(node, messages.MetadataRequest(topics=[]))
        assert response.brokers
        assert (await client.get_connection(node)) is not first
        # Losing a connection asks for fresh metadata.
        await _until(lambda: client.cluster.version > version, "metadata asked again")
    finally:
        await client.close()


async def test_ready_connects_in_the_background_and_backs_off(mock_cluster, proxy_factory):
    proxy = await proxy_factory(mock_cluster.bootstrap)
    client = KafkaClient(proxy.bootstrap, reconnect_backoff_ms=200, reconnect_backoff_max_ms=400)
    await client.start()
    woke = asyncio.Event()
    client.add_listener(woke.set)
    try:
        node = next(iter(client.cluster.brokers))
        assert not client.ready(node)
        await asyncio.wait_for(woke.wait(), WAIT_S)
        assert client.ready(node)
        await proxy.close()  # the broker is gone now
        await _until(
            lambda: not client.ready(node) and client.is_backing_off(node), "the lost broker backed off"
        )
        with pytest.raises(KafkaConnectionError):
            await client.get_connection(node)
    finally:
        await client.close()


async def test_metadata_is_refreshed_periodically(mock_cluster):
    client = KafkaClient(mock_cluster.bootstrap, metadata_max_age_ms=100)
    await client.start()
    try:
        version = client.cluster.version
        # Refreshed again and again (every 0.1 s), not once: two refreshes, however slow the runner.
        await _until(lambda: client.cluster.version >= version + 2, "two periodic refreshes")
    finally:
        await client.close()


def test_parse_bootstrap_servers():
    assert parse_bootstrap_servers("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap_servers(["[::1]:9093", "host"]) == [("::1", 9093), ("host", 9092)]
    with pytest.raises(ConfigError):
        parse_bootstrap_servers("a:notaport")
    with pytest.raises(ConfigError):
        parse_bootstrap_servers("")


def test_security_settings_are_validated():
    with pytest.raises(ConfigError, match="security_protocol"):
        KafkaClient("a:1", security_protocol="SASL")
    with pytest.raises(ConfigError, match="sasl_mechanism"):
        KafkaClient("a:1", security_protocol="SASL_SSL")
    with pytest.raises(ConfigError, match="SCRAM"):
        create_mechanism("SCRAM-SHA-1", username="u", password="p")
    with pytest.raises(ConfigError, match="sasl_plain_username"):
        create_mechanism("PLAIN")


def test_exponential_backoff():
    backoff = ExponentialBackoff(100, 1000, jitter=0)
    assert [backoff.backoff_ms(n) for n in range(6)] == [100, 200, 400, 800, 1000, 1000]
    jittered = ExponentialBackoff(100, 1000, jitter=0.2)
    assert all(80 <= jittered.backoff_ms(0) <= 120 for _ in range(100))
    assert ExponentialBackoff(50, 50).backoff_ms(10) <= 60


def test_client_config_validates_the_shared_settings():
    for option, value in [
        ("bootstrap_servers", ""),
        ("request_timeout_ms", 0),
        ("retry_backoff_ms", -1),
        ("metadata_max_age_ms", True),
        ("security_protocol", "TLS"),
        ("client_id", 5),
    ]:
        with pytest.raises(ConfigError) as info:
            ClientConfig(**{option: value}).validate()
        assert info.value.option == option
    with pytest.raises(ConfigError, match="sasl_mechanism"):
        ClientConfig(security_protocol="SASL_PLAINTEXT").validate()
    # A producer's settings are a ClientConfig, so its shared options are validated the same way.
    assert issubclass(ProducerConfig, ClientConfig)
    with pytest.raises(ConfigError, match="reconnect_backoff_max_ms"):
        ProducerConfig.from_kwargs(reconnect_backoff_max_ms=-5)


async def test_from_config_builds_a_working_client(mock_cluster):
    config = ClientConfig(
        bootstrap_servers=mock_cluster.bootstrap, request_timeout_ms=7000, retry_backoff_ms=20
    )
    config.validate()
    client = KafkaClient.from_config(config)
    assert client.client_id == "sdk" and client.request_timeout_ms == 7000
    assert ProducerConfig.from_kwargs().effective_client_id == "sdk-producer"
    await client.start()
    try:
        assert client.cluster.brokers
    finally:
        await client.close()
