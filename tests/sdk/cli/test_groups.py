"""``topicwright groups`` on the reference broker and on Apache Kafka: lag equals end offset minus
committed offset, as librdkafka reads both and as Kafka's own ``kafka-consumer-groups --describe``
prints them; a reset moves the group (a consumer in the group reads from the new offsets); a group
with an active member is refused, as Kafka's tool refuses it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

from .conftest import Cli, wait_for

GROUPS_TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


@pytest.fixture(params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def cluster(request: pytest.FixtureRequest) -> str:
    """The bootstrap of the reference broker or of Apache Kafka's session node."""
    if request.param == "apache":
        return str(request.getfixturevalue("apache_kafka").bootstrap)
    return str(request.getfixturevalue("broker").bootstrap)


def fill(cli: Cli, topic: str, counts: dict[int, int]) -> None:
    """``counts[p]`` records in partition ``p`` of a new topic."""
    cli("topics", "create", "--topic", topic, "--partitions", str(len(counts)))
    for partition, count in counts.items():
        lines = "".join(f"p{partition}-{i}\n" for i in range(count))
        cli("produce", "-t", topic, "--partition", str(partition), stdin=lines)


def oracle_positions(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """partition -> (committed, high watermark) as librdkafka reads them (committed -1001: none)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    try:
        tps = [confluent_kafka.TopicPartition(topic, p) for p in range(partitions)]
        committed = consumer.committed(tps, timeout=15)
        return {
            tp.partition: (tp.offset, consumer.get_watermark_offsets(tp, timeout=15)[1]) for tp in committed
        }
    finally:
        consumer.close()


def kafka_tool_rows(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[str, str, str]]:
    """(topic, partition) -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG) from Kafka's own tool."""
    from tests.oracles.kafka_tools import run_tool

    result = run_tool(GROUPS_TOOL, "--bootstrap-server", bootstrap, "--describe", "--group", group)
    assert result.returncode == 0, result.stderr
    lines = [line.split() for line in result.stdout.splitlines() if line.strip()]
    header = next(i for i, cells in enumerate(lines) if cells[:2] == ["GROUP", "TOPIC"])
    columns = lines[header]
    rows = {}
    for cells in lines[header + 1 :]:
        row = dict(zip(columns, cells, strict=False))
        rows[(row["TOPIC"], int(row["PARTITION"]))] = (
            row["CURRENT-OFFSET"],
            row["LOG-END-OFFSET"],
            row["LAG"],
        )
    return rows


def test_lag_is_end_offset_minus_committed_as_kafkas_tool_reports_it(cluster: str, name: Any) -> None:
    cli, topic, group = Cli(cluster), name("lag"), name("group")
    fill(cli, topic, {0: 6, 1: 4, 2: 0})
    consumed = cli("consume", "-t", topic, "-g", group, "--from-beginning", "--max-messages", "5")
    assert len(consumed.stdout.splitlines()) == 5

    described = cli("groups", "describe", "-g", group, "--json").json()
    assert described["state"] == "Empty" and described["members"] == []
    rows = {(r["topic"], r["partition"]): r for r in described["partitions"]}
    oracle = oracle_positions(cluster, group, topic, 3)
    assert sum(r["committed_offset"] for r in rows.values()) == 5
    for partition, (committed, end) in oracle.items():
        row = rows[(topic, partition)]
        assert (row["committed_offset"], row["end_offset"]) == (committed, end)
        assert row["lag"] == end - committed
    assert sum(r["lag"] for r in rows.values()) == 10 - 5

    table = {(r["TOPIC"], int(r["PARTITION"])): r for r in cli("groups", "describe", "-g", group).table()}
    kafka_rows = kafka_tool_rows(cluster, group)
    assert set(kafka_rows) == set(table) == set(rows)
    for key, (current, end, lag) in kafka_rows.items():
        assert (table[key]["CURRENT-OFFSET"], table[key]["LOG-END-OFFSET"], table[key]["LAG"]) == (
            current,
            end,
            lag,
        )


def test_reset_offsets_plans_then_moves_the_group(cluster: str, name: Any) -> None:
    cli, topic, group = Cli(cluster), name("reset"), name("group")
    fill(cli, topic, {0: 5, 1: 3})
    cli("consume", "-t", topic, "-g", group, "--from-beginning", "--exit-at-end")
    at_end = {
        r["partition"]: r["committed_offset"]
        for r in cli("groups", "describe", "-g", group, "--json").json()["partitions"]
    }
    assert at_end == {0: 5, 1: 3}

    plan = cli("groups", "reset-offsets", "-g", group, "--all-topics", "--to-earliest")
    assert "Dry run" in plan.stderr
    assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["NEW-OFFSET"]) for r in plan.table()] == [
        ("0", "5", "0"),
        ("1", "3", "0"),
    ]
    after_plan = cli("groups", "describe", "-g", group, "--json").json()["partitions"]
    assert {r["partition"]: r["committed_offset"] for r in after_plan} == at_end  # nothing moved

    executed = cli(
        "groups", "reset-offsets", "-g", group, "-t", topic, "--to-earliest", "--execute", "--json"
    ).json()
    assert executed["executed"] and [r["new_offset"] for r in executed["partitions"]] == [0, 0]
    # A consumer of the group now reads everything again, from the reset offsets.
    again = cli("consume", "-t", topic, "-g", group, "--exit-at-end")
    assert sorted(again.stdout.splitlines()) == sorted(
        [f"p0-{i}" for i in range(5)] + [f"p1-{i}" for i in range(3)]
    )

    shifted = cli(
        "groups", "reset-offsets", "-g", group, "-t", f"{topic}:0", "--shift-by", "-2", "--execute", "--json"
    )
    assert [(r["partition"], r["new_offset"]) for r in shifted.json()["partitions"]] == [(0, 3)]
    assert cli("consume", "-t", topic, "-g", group, "--exit-at-end").stdout.splitlines() == ["p0-3", "p0-4"]

    clamped = cli(
        "groups", "reset-offsets", "-g", group, "--all-topics", "--shift-by", "-100", "--json"
    ).json()
    assert [r["new_offset"] for r in clamped["partitions"]] == [0, 0]
    past = cli(
        "groups",
        "reset-offsets",
        "-g",
        group,
        "--all-topics",
        "--to-datetime",
        "2000-01-01T00:00:00Z",
        "--json",
    )
    assert [r["new_offset"] for r in past.json()["partitions"]] == [0, 0]
    future = cli(
        "groups",
        "reset-offsets",
        "-g",
        group,
        "--all-topics",
        "--to-datetime",
        "2999-01-01T00:00:00+00:00",
        "--json",
    )
    assert [r["new_offset"] for r in future.json()["partitions"]] == [5, 3]
    bad_time = cli(
        "groups", "reset-offsets", "-g", group, "--all-topics", "--to-datetime", "yesterday", check=False
    )
    assert bad_time.returncode == 2 and "ISO-8601" in bad_time.stderr


@pytest.fixture
def members() -> Iterator[list[confluent_kafka.Consumer]]:
    made: list[confluent_kafka.Consumer] = []
    try:
        yield made
    finally:
        for consumer in made:
            consumer.close()


def test_reset_is_refused_while_the_group_has_members(cluster: str, name: Any, members: list[Any]) -> None:
    cli, topic, group = Cli(cluster), name("busy"), name("group")
    fill(cli, topic, {0: 2})
    member = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster, "group.id": group, "auto.offset.reset": "earliest", "log_level": 0}
    )
    members.append(member)
    member.subscribe([topic])

    def assigned() -> bool:
        member.poll(0.2)
        return bool(member.assignment())

    wait_for(assigned, "the member's assignment")
    described = cli("groups", "describe", "-g", group, "--json").json()
    assert described["state"] == "Stable" and len(described["members"]) == 1
    assert described["members"][0]["assignment"] == [[topic, 0]]
    assert described["partitions"][0]["consumer_id"] == described["members"][0]["member_id"]

    refused = cli(
        "groups", "reset-offsets", "-g", group, "-t", topic, "--to-latest", "--execute", check=False
    )
    assert refused.returncode == 1
    assert f"the group {group!r} is inactive, but the current state is Stable" in refused.stderr
    listed = {g["group"]: g for g in cli("groups", "list", "--json").json()}
    assert listed[group]["state"] == "Stable"

    members.pop().close()
    wait_for(
        lambda: cli("groups", "describe", "-g", group, "--json").json()["state"] == "Empty", "an empty group"
    )
    cli("groups", "reset-offsets", "-g", group, "-t", topic, "--to-latest", "--execute")
    cli("groups", "delete", "-g", group)
    missing = cli("groups", "describe", "-g", group, check=False)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
