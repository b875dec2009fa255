"""Topic configs are checked as Kafka 4.1 checks them, on our broker and on Apache Kafka alike.

Kafka 4 refuses ``segment.bytes`` below 1 MiB (KIP-1030) and offers tests the internal topic config
``internal.segment.bytes`` instead (DescribeConfigs lists it once set). Each case sends one
CreateTopics (validate only) with one bad value and expects Kafka's error code.
"""

from __future__ import annotations

import uuid

import pytest

from sdk.protocol import messages
from sdk.protocol.errors import ErrorCode
from tests.reference_broker.wire import WireClient

pytestmark = pytest.mark.interop

OK = ErrorCode.NONE
INVALID = ErrorCode.INVALID_CONFIG


@pytest.fixture(params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest) -> str:
    fixture = "apache_kafka" if request.param == "apache" else "broker"
    return str(request.getfixturevalue(fixture).bootstrap)


def create(
    bootstrap: str,
    configs: dict[str, str],
    *,
    validate_only: bool = True,
    partitions: int = 1,
    name: str | None = None,
) -> messages.CreateTopicsResponse.CreatableTopicResult:
    topic = messages.CreateTopicsRequest.CreatableTopic(
        name=name or f"cfg-{uuid.uuid4().hex[:10]}",
        num_partitions=partitions,
        replication_factor=1,
        configs=[
            messages.CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()
        ],
    )
    request = messages.CreateTopicsRequest(topics=[topic], timeout_ms=30_000, validate_only=validate_only)
    with WireClient(bootstrap) as wire:
        response = wire.request(request, 7)
    return response.topics[0]


@pytest.mark.parametrize(
    ("configs", "expected"),
    [
        ({"segment.bytes": "1048575"}, INVALID),
        ({"segment.bytes": "14"}, INVALID),
        ({"segment.bytes": "1048576"}, OK),
        ({"internal.segment.bytes": "1000"}, OK),
        ({"min.insync.replicas": "0"}, INVALID),
        ({"file.delete.delay.ms": "-1"}, INVALID),
        ({"preallocate": "maybe"}, INVALID),
        ({"unclean.leader.election.enable": "yes"}, INVALID),
        ({"compression.gzip.level": "10"}, INVALID),
        ({"compression.lz4.level": "18"}, INVALID),
        ({"compression.zstd.level": "23"}, INVALID),
        ({"local.retention.ms": "-3"}, INVALID),
        ({"message.format.version": "3.0"}, INVALID),
        ({"message.downconversion.enable": "true"}, INVALID),
        ({"segment.index.bytes": "3"}, INVALID),
        ({"max.compaction.lag.ms": "0"}, INVALID),
    ],
)
def test_topic_config_values_are_checked_as_kafka_checks_them(
    bootstrap: str, configs: dict[str, str], expected: int
) -> None:
    result = create(bootstrap, configs)
    assert result.error_code == expected, result.error_message


def test_internal_segment_bytes_is_accepted_and_described_when_set(bootstrap: str) -> None:
    name = f"cfg-internal-{uuid.uuid4().hex[:8]}"
    assert (
        create(
            bootstrap,
            {"internal.segment.bytes": "1000", "retention.ms": "-1"},
            validate_only=False,
            name=name,
        ).error_code
        == OK
    )
    request = messages.DescribeConfigsRequest(
        resources=[
            messages.DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=2, resource_name=name, configuration_keys=None
            )
        ]
    )
    with WireClient(bootstrap) as wire:
        described = wire.request(request, 4).results[0]
    values = {c.name: c.value for c in described.configs}
    assert described.error_code == OK
    assert values["segment.bytes"] == str(1 << 30)
    assert values["internal.segment.bytes"] == "1000"


def create_partitions(bootstrap: str, topic: str, count: int) -> messages.CreatePartitionsResponse:
    request = messages.CreatePartitionsRequest(
        topics=[
            messages.CreatePartitionsRequest.CreatePartitionsTopic(name=topic, count=count, assignments=None)
        ],
        timeout_ms=30_000,
        validate_only=True,
    )
    with WireClient(bootstrap) as wire:
        return wire.request(request, 3)


def test_partitions_per_request_are_capped_as_kafkas_controller_caps_them(bootstrap: str) -> None:
    too_many = create(bootstrap, {}, partitions=10_001)
    assert (too_many.error_code, too_many.error_message) == (
        ErrorCode.POLICY_VIOLATION,
        "Excessively large number of partitions per request.",
    )
    # One metadata record per topic, partition and config override: 10,001 records are too many.
    for partitions, configs in ((10_000, {}), (9_999, {"retention.ms": "1000"})):
        too_large = create(bootstrap, configs, partitions=partitions)
        assert (too_large.error_code, too_large.error_message) == (
            ErrorCode.POLICY_VIOLATION,
            "Unable to perform excessively large batch operation.",
        )
    assert create(bootstrap, {}, partitions=9_999).error_code == OK
    name = f"cfg-grow-{uuid.uuid4().hex[:8]}"
    assert create(bootstrap, {}, validate_only=False, name=name).error_code == OK
    assert create_partitions(bootstrap, name, 10_001).results[0].error_code == OK
    grown = create_partitions(bootstrap, name, 10_002).results[0]
    assert (grown.error_code, grown.error_message) == (ErrorCode.UNKNOWN_SERVER_ERROR, None)
