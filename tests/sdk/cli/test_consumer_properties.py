"""``--command-config`` with the Java consumer's ``group.protocol`` and ``group.remote.assignor``:
``consume --group`` joins with the protocol the file names (on our broker and on Apache Kafka), and
a subcommand that builds no consumer refuses them rather than dropping them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.sdk.cli.conftest import Cli


@pytest.fixture(params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest) -> str:
    if request.param == "apache":
        return str(request.getfixturevalue("apache_kafka").bootstrap)
    return str(request.getfixturevalue("broker").bootstrap)


def test_consume_joins_with_the_group_protocol_of_the_command_config(
    bootstrap: str, name: Any, tmp_path: Path
) -> None:
    cli, topic, group = Cli(bootstrap), name("events"), name("group")
    properties = tmp_path / "consumer.properties"
    properties.write_text("group.protocol=consumer\ngroup.remote.assignor=uniform\n")
    cli("topics", "create", "--topic", topic, "--partitions", "1")
    cli("produce", "-t", topic, stdin="one\ntwo\n")
    options = ["--group", group, "--from-beginning", "-e", "--command-config", str(properties)]
    consumed = cli("consume", "-t", topic, *options)
    assert consumed.stdout.splitlines() == ["one", "two"]
    listed = {g["group"]: g for g in cli("groups", "list", "--json").json()}
    assert listed[group]["type"] == "consumer", listed[group]


def test_a_subcommand_without_a_consumer_refuses_consumer_properties(broker: Any, tmp_path: Path) -> None:
    properties = tmp_path / "consumer.properties"
    properties.write_text("group.protocol=consumer\n")
    refused = Cli(broker.bootstrap)("topics", "list", "--command-config", str(properties), check=False)
    assert refused.returncode == 2, refused
    assert "group.protocol" in refused.stderr and "consume" in refused.stderr, refused
