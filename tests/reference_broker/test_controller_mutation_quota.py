"""The ``controller_mutation_rate`` client quota (KIP-599) on CreateTopics, DeleteTopics and
CreatePartitions, as Apache Kafka 4.1 enforces it: strict from CreateTopics v6, DeleteTopics v5 and
CreatePartitions v3 (a topic coming while the quota is exhausted is refused with
THROTTLING_QUOTA_EXCEEDED; the topic that exhausts it is still done whole), permissive before
(every topic done, the response throttled)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from reference_broker.testing import BrokerFactory
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AlterClientQuotasRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)
from tests.reference_broker.wire import WireClient

pytestmark = [pytest.mark.apache_kafka, pytest.mark.timeout(300)]

#: With quota 1/s and Kafka's default 11 one-second windows the bucket holds 11 partitions.
QUOTA = 1.0
BIG, SMALL = 20, 1


def _set_quota(bootstrap: str, *client_ids: str) -> None:
    """The quota for each of ``client_ids``, in one request (Kafka applies them together)."""
    request = AlterClientQuotasRequest(
        entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[AlterClientQuotasRequest.EntityData(entity_type="client-id", entity_name=client_id)],
                ops=[
                    AlterClientQuotasRequest.OpData(key="controller_mutation_rate", value=QUOTA, remove=False)
                ],
            )
            for client_id in client_ids
        ],
        validate_only=False,
    )
    with WireClient(bootstrap) as client:
        assert all(e.error_code == 0 for e in client.request(request, 1).entries)


def _create(bootstrap: str, client_id: str, version: int, names: list[str]) -> Any:
    request = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(name=name, num_partitions=count, replication_factor=1)
            for name, count in zip(names, (BIG, SMALL), strict=True)
        ],
        timeout_ms=30_000,
        validate_only=False,
    )
    with WireClient(bootstrap, timeout=60.0, client_id=client_id) as client:
        return client.request(request, version)


def _until_quota_applies(bootstrap: str, client_id: str, version: int, tag: str) -> Any:
    """Kafka applies an altered quota once its metadata reaches the quota manager: retry with
    fresh topic names until a response is throttled, for at most 30 s."""
    deadline = time.monotonic() + 30
    attempt = 0
    while True:
        attempt += 1
        names = [f"{tag}-big-{attempt}", f"{tag}-small-{attempt}"]
        response = _create(bootstrap, client_id, version, names)
        if response.throttle_time_ms > 0 or time.monotonic() > deadline:
            return response


def _outcomes(bootstrap: str, tag: str) -> dict[int, tuple[list[int], int]]:
    found = {}
    for version in (7, 5):
        client_id = f"mut-{tag}-v{version}"
        _set_quota(bootstrap, client_id)
        response = _until_quota_applies(bootstrap, client_id, version, f"{tag}-v{version}")
        found[version] = ([t.error_code for t in response.topics], response.throttle_time_ms)
    return found


def test_create_topics_is_held_to_the_controller_mutation_quota_as_on_kafka(
    broker_factory: BrokerFactory, apache_kafka: Any
) -> None:
    tag = uuid.uuid4().hex[:6]
    answers = {
        "ours": _outcomes(broker_factory().bootstrap, tag),
        "kafka": _outcomes(apache_kafka.bootstrap, tag),
    }
    for name, found in answers.items():
        strict_codes, strict_throttle = found[7]
        assert strict_codes == [ErrorCode.NONE, ErrorCode.THROTTLING_QUOTA_EXCEEDED], (name, answers)
        assert strict_throttle > 0, (name, answers)
        permissive_codes, permissive_throttle = found[5]
        assert permissive_codes == [ErrorCode.NONE, ErrorCode.NONE], (name, answers)
        assert permissive_throttle > 0, (name, answers)


def _setup_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    """Create topics as a client without a quota."""
    request = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)
            for name in names
        ],
        timeout_ms=30_000,
        validate_only=False,
    )
    with WireClient(bootstrap, timeout=60.0, client_id="mutation-setup") as client:
        response = client.request(request, 7)
    assert [t.error_code for t in response.topics] == [ErrorCode.NONE] * len(names), response


def _delete(bootstrap: str, client_id: str, version: int, names: list[str]) -> tuple[list[int], int]:
    request = DeleteTopicsRequest(topic_names=names, timeout_ms=30_000)
    with WireClient(bootstrap, timeout=60.0, client_id=client_id) as client:
        response = client.request(request, version)
    codes = {r.name: r.error_code for r in response.responses}
    return [codes[name] for name in names], response.throttle_time_ms


def _add_partitions(
    bootstrap: str, client_id: str, version: int, names: list[str], added: int
) -> tuple[list[int], int]:
    request = CreatePartitionsRequest(
        topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=1 + added, assignments=None)
            for name in names
        ],
        timeout_ms=30_000,
        validate_only=False,
    )
    with WireClient(bootstrap, timeout=60.0, client_id=client_id) as client:
        response = client.request(request, version)
    codes = {r.name: r.error_code for r in response.results}
    return [codes[name] for name in names], response.throttle_time_ms


def _wait_until_applied(bootstrap: str, probe_id: str, tag: str) -> None:
    """Kafka applies an altered quota once its metadata reaches the quota manager: create topics
    past the bucket as ``probe_id`` (quota'd in the same request as the client measured) until
    one is throttled, for at most 60 s."""
    deadline = time.monotonic() + 60
    attempt = 0
    while time.monotonic() < deadline:
        attempt += 1
        request = CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.CreatableTopic(
                    name=f"{tag}-probe-{attempt}", num_partitions=12, replication_factor=1
                )
            ],
            timeout_ms=30_000,
            validate_only=False,
        )
        with WireClient(bootstrap, timeout=60.0, client_id=probe_id) as client:
            if client.request(request, 5).throttle_time_ms > 0:
                return
    raise AssertionError(f"the quota of {probe_id} did not apply within 60 s on {bootstrap}")


def _mutation_outcomes(bootstrap: str, tag: str, api: str, versions: tuple[int, int]) -> dict[int, Any]:
    """As a client with the quota, once it applies: one request deleting (or adding the
    partitions of) a big topic, which exhausts the bucket, then one for a small topic. One topic
    per request: Kafka's controller takes a DeleteTopics request's topics in no set order."""
    found = {}
    for version in versions:
        client_id = f"mut-{tag}-{api}-v{version}"
        _set_quota(bootstrap, client_id, f"{client_id}-probe")
        _wait_until_applied(bootstrap, f"{client_id}-probe", f"{tag}-{api}-v{version}")
        big, small = f"{tag}-{api}-v{version}-big", f"{tag}-{api}-v{version}-small"
        if api == "delete":
            _setup_topics(bootstrap, [big], BIG)
            _setup_topics(bootstrap, [small], SMALL)
            answers = [_delete(bootstrap, client_id, version, [name]) for name in (big, small)]
        else:
            _setup_topics(bootstrap, [big, small], 1)
            answers = [
                _add_partitions(bootstrap, client_id, version, [name], added)
                for name, added in ((big, BIG), (small, SMALL))
            ]
        found[version] = [(codes, throttle_ms > 0) for codes, throttle_ms in answers]
    return found


@pytest.mark.parametrize(
    ("api", "strict_version", "permissive_version"),
    [("delete", 5, 4), ("add-partitions", 3, 2)],
    ids=["DeleteTopics", "CreatePartitions"],
)
def test_deletions_and_added_partitions_are_held_to_the_controller_mutation_quota_as_on_kafka(
    broker_factory: BrokerFactory,
    apache_kafka: Any,
    api: str,
    strict_version: int,
    permissive_version: int,
) -> None:
    tag = uuid.uuid4().hex[:6]
    versions = (strict_version, permissive_version)
    answers = {
        "ours": _mutation_outcomes(broker_factory().bootstrap, tag, api, versions),
        "kafka": _mutation_outcomes(apache_kafka.bootstrap, tag, api, versions),
    }
    assert answers["ours"] == answers["kafka"], answers
    # Strict: the big topic is done whole (no violation yet, no throttle), the next refused.
    assert answers["kafka"][strict_version] == [
        ([ErrorCode.NONE], False),
        ([ErrorCode.THROTTLING_QUOTA_EXCEEDED], True),
    ], answers
    # Permissive: both done, each response throttled once the bucket is negative.
    assert answers["kafka"][permissive_version] == [([ErrorCode.NONE], True), ([ErrorCode.NONE], True)], (
        answers
    )
