"""Config defaults of our broker against Apache Kafka 4.1's, as ``kafka-configs --describe --all``
prints them on both: every broker and topic config both brokers have whose default differs is
listed below with the reason the difference stays, and the list is exactly the set of differences
(a difference that disappears must leave the list too).

Our broker runs with no config at all (not the fast test defaults of ``EMBEDDED_DEFAULTS``). A
broker config's default is its DEFAULT_CONFIG synonym ("null" without one), so the settings the
Kafka test node is started with do not count; a topic config's default is its value on a topic
without overrides.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from reference_broker.testing import BrokerProcess
from tests.oracles.kafka_tools import create_topic, run_tool

pytestmark = [pytest.mark.apache_kafka, pytest.mark.slow, pytest.mark.usefixtures("kafka_jars_available")]

CONFIGS = "kafka.admin.ConfigCommand"
_SINGLE_NODE = "single node: an internal topic can only have one replica, so one is the default"
_LINE = re.compile(r"\s*(\S+?)=(.*?) sensitive=(?:true|false) synonyms=\{(.*)\}$")

#: Broker config -> why its default differs from Kafka 4.1's.
BROKER_DIFFERENCES = {
    "advertised.listeners": "empty list where Kafka has null: both mean 'advertise the listeners'",
    "group.coordinator.rebalance.protocols": "streams groups (KIP-1071) are not implemented",
    "listeners": (
        "empty: the broker listens on its --host/--port command-line options, which default to "
        "Kafka's port 9092"
    ),
    "log.dir": "the data dir is the --data-dir option (described as log.dirs), there is no /tmp default",
    "node.id": "1, so that the broker starts with no config at all (Kafka requires it)",
    "process.roles": "always broker and controller (Kafka requires it)",
    "offsets.topic.replication.factor": _SINGLE_NODE,
    "transaction.state.log.replication.factor": _SINGLE_NODE,
    "transaction.state.log.min.isr": _SINGLE_NODE,
}
#: Topic config -> why its default differs from Kafka 4.1's.
TOPIC_DIFFERENCES: dict[str, str] = {}
_AUTHORIZER = "read by Kafka's authorizer from the broker's properties, not a KafkaConfig key"
#: Broker configs Kafka 4.1 does not describe -> why ours has them.
OURS_ONLY = {
    "advertised.host": "the old spelling of the advertised address, kept for old config files",
    "advertised.port": "the old spelling of the advertised address, kept for old config files",
    "allow.everyone.if.no.acl.found": _AUTHORIZER,
    "super.users": _AUTHORIZER,
    "log.open.segments.max": "the cap on segments holding open files (Kafka opens indexes lazily "
    "and keeps segment files open; this broker closes inactive ones)",
    "cluster.id": "Kafka keeps it in meta.properties only; ours also takes it as a setting",
    "transaction.version": "a feature level set with kafka-storage format and kafka-features on Kafka; "
    "here the level a single node finalizes and a new cluster is bootstrapped with",
    "zookeeper.connect": "removed in Kafka 4; accepted and ignored so old config files still start",
}


def _synonyms(text: str) -> dict[tuple[str, str], str]:
    """``SOURCE:name=value, ...`` as {(source, name): value} (values may hold commas)."""
    found: dict[tuple[str, str], str] = {}
    for match in re.finditer(r"([A-Z_]+):([^=,\s]+)=(.*?)(?=, [A-Z_]+:[^=,\s]+=|$)", text):
        found[(match.group(1), match.group(2))] = match.group(3)
    return found


def describe_all(
    bootstrap: str, entity_type: str, name: str
) -> dict[str, tuple[str, dict[tuple[str, str], str]]]:
    result = run_tool(
        CONFIGS,
        "--bootstrap-server",
        bootstrap,
        "--describe",
        "--all",
        "--entity-type",
        entity_type,
        "--entity-name",
        name,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    described = {}
    for line in result.stdout.splitlines():
        match = _LINE.match(line)
        if match:
            described[match.group(1)] = (match.group(2), _synonyms(match.group(3)))
    assert described, result.stdout
    return described


def broker_defaults(bootstrap: str) -> dict[str, str]:
    return {
        key: synonyms.get(("DEFAULT_CONFIG", key), "null")
        for key, (_, synonyms) in describe_all(bootstrap, "brokers", "1").items()
    }


def topic_defaults(bootstrap: str, topic: str) -> dict[str, str]:
    create_topic(bootstrap, topic, 1)
    return {key: value for key, (value, _) in describe_all(bootstrap, "topics", topic).items()}


@pytest.fixture(scope="module")
def ours() -> Iterator[BrokerProcess]:
    broker = BrokerProcess()
    broker.config = {}  # no config file at all: the broker's own defaults
    with broker:
        yield broker


@pytest.fixture(scope="module")
def brokers_defaults(apache_kafka: Any, ours: BrokerProcess) -> tuple[dict[str, str], dict[str, str]]:
    """(ours, Kafka's) broker config defaults."""
    return broker_defaults(ours.bootstrap), broker_defaults(apache_kafka.bootstrap)


def _check(ours: dict[str, str], kafka: dict[str, str], listed: dict[str, str]) -> None:
    shared = set(ours) & set(kafka)
    differing = {key for key in shared if ours[key] != kafka[key]}
    unexplained = {key: (ours[key], kafka[key]) for key in sorted(differing - set(listed))}
    gone = sorted(set(listed) - differing)
    assert not unexplained, f"(ours, Kafka's) defaults that differ without a reason: {unexplained}"
    assert not gone, f"listed as different but now equal (or no longer shared): {gone}"


def test_every_broker_config_default_difference_is_listed_with_its_reason(
    brokers_defaults: tuple[dict[str, str], dict[str, str]],
) -> None:
    _check(*brokers_defaults, BROKER_DIFFERENCES)


def test_every_broker_config_kafka_lacks_is_listed_with_its_reason(
    brokers_defaults: tuple[dict[str, str], dict[str, str]],
) -> None:
    ours, kafka = brokers_defaults
    assert sorted(set(ours) - set(kafka)) == sorted(OURS_ONLY)


def test_every_topic_config_default_difference_is_listed_with_its_reason(
    apache_kafka: Any, ours: BrokerProcess
) -> None:
    topic = f"defaults-{uuid.uuid4().hex[:8]}"
    _check(
        topic_defaults(ours.bootstrap, topic),
        topic_defaults(apache_kafka.bootstrap, topic),
        TOPIC_DIFFERENCES,
    )
