"""The ``controller_mutation_rate`` client quota (KIP-599) on CreateTopics, as Apache Kafka 4.1
enforces it: strict from v6 (a topic coming while the quota is exhausted is refused with
THROTTLING_QUOTA_EXCEEDED; the topic that exhausts it is still created whole), permissive before
(every topic created, the response throttled)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from reference_broker.testing import BrokerFactory
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import AlterClientQuotasRequest, CreateTopicsRequest
from tests.reference_broker.wire import WireClient

pytestmark = [pytest.mark.apache_kafka, pytest.mark.timeout(300)]

#: With quota 1/s and Kafka's default 11 one-second windows the bucket holds 11 partitions.
QUOTA = 1.0
BIG, SMALL = 20, 1


def _set_quota(bootstrap: str, client_id: str) -> None:
    request = AlterClientQuotasRequest(
        entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[AlterClientQuotasRequest.EntityData(entity_type="client-id", entity_name=client_id)],
                ops=[
                    AlterClientQuotasRequest.OpData(key="controller_mutation_rate", value=QUOTA, remove=False)
                ],
            )
        ],
        validate_only=False,
    )
    with WireClient(bootstrap) as client:
        assert client.request(request, 1).entries[0].error_code == 0


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
