"""DescribeTopicPartitions (API 75) on our broker and on Apache Kafka, answers compared: name order,
the partition limit and the cursor that pages through it, missing and invalid names, a cursor
outside the named topics, and every topic when none is named."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from sdk.protocol.messages import DescribeTopicPartitionsRequest as Request
from tests.reference_broker.wire import WireClient

pytestmark = pytest.mark.interop

PARTITIONS = {"a": 5, "b": 3, "c": 1}


@pytest.fixture(params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest) -> str:
    fixture = "apache_kafka" if request.param == "apache" else "broker"
    return str(request.getfixturevalue(fixture).bootstrap)


@pytest.fixture
def topics(bootstrap: str) -> dict[str, str]:
    """Three topics (5, 3 and 1 partitions) under one fresh prefix: letter -> name."""
    prefix = f"dtp-{uuid.uuid4().hex[:8]}"
    names = {letter: f"{prefix}-{letter}" for letter in PARTITIONS}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(names[k], n, 1) for k, n in PARTITIONS.items()])
    for future in futures.values():
        future.result(timeout=30)
    deadline = time.monotonic() + 30
    while not set(names.values()) <= set(admin.list_topics(timeout=10).topics):
        assert time.monotonic() < deadline, "topics not visible"
        time.sleep(0.1)
    return names


def describe(
    bootstrap: str, names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None
) -> Any:
    request = Request(
        topics=[Request.TopicRequest(name=n) for n in names],
        response_partition_limit=limit,
        cursor=None if cursor is None else Request.Cursor(topic_name=cursor[0], partition_index=cursor[1]),
    )
    client = WireClient(bootstrap)
    try:
        return client.request(request, 0)
    finally:
        client.sock.close()


def view(response: Any, keep: set[str] | None = None) -> tuple[list[Any], Any]:
    """What the answer means, without ids and node numbers."""
    topics = [
        (
            t.name,
            t.error_code,
            [
                (p.partition_index, p.error_code, p.eligible_leader_replicas, p.last_known_elr)
                for p in t.partitions
            ],
        )
        for t in response.topics
        if keep is None or t.name in keep
    ]
    cursor = response.next_cursor
    return topics, None if cursor is None else (cursor.topic_name, cursor.partition_index)


def test_named_topics_page_through_the_partition_limit_in_name_order(
    bootstrap: str, topics: dict[str, str]
) -> None:
    a, b, c = topics["a"], topics["b"], topics["c"]
    missing = a + "-missing"
    got, cursor = view(describe(bootstrap, [c, missing, a, "bad name!", b], limit=4))
    assert got == [
        ("bad name!", 17, []),
        (a, 0, [(i, 0, [], []) for i in range(4)]),
    ]
    assert cursor == (a, 4)
    got, cursor = view(describe(bootstrap, [c, missing, a, b], limit=4, cursor=cursor))
    assert got == [
        (a, 0, [(4, 0, [], [])]),
        (missing, 3, []),
        (b, 0, [(i, 0, [], []) for i in range(3)]),
    ]
    assert cursor == (c, 0), "the limit ended exactly at b's end: the cursor names the next topic"
    got, cursor = view(describe(bootstrap, [c, missing, a, b], limit=4, cursor=cursor))
    assert (got, cursor) == ([(c, 0, [(0, 0, [], [])])], None)


def test_a_cursor_outside_the_named_topics_is_invalid_request(bootstrap: str, topics: dict[str, str]) -> None:
    response = describe(bootstrap, [topics["a"]], cursor=(topics["b"], 0))
    assert [(t.name, t.error_code) for t in response.topics] == [(topics["a"], 42)]


def test_no_names_means_every_topic_from_the_cursor_on(bootstrap: str, topics: dict[str, str]) -> None:
    ours = set(topics.values())
    got, _ = view(describe(bootstrap, [], cursor=(topics["b"], 1)), keep=ours)
    assert got == [
        (topics["b"], 0, [(i, 0, [], []) for i in (1, 2)]),
        (topics["c"], 0, [(0, 0, [], [])]),
    ]
