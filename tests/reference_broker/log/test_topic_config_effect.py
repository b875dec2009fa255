"""Topic configs this broker cannot act on are refused as Kafka refuses them, not accepted and
ignored: ``remote.storage.enable=true`` without tiered storage (Apache Kafka as the control)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import CreateTopicsRequest
from tests.reference_broker.wire import WireClient


@pytest.fixture(params=["reference_broker", pytest.param("apache_kafka", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest, broker: Any) -> str:
    """Our broker, or Apache Kafka (the oracle), as a bootstrap address."""
    if request.param == "reference_broker":
        return str(broker.bootstrap)
    return str(request.getfixturevalue("apache_kafka").bootstrap)


def _create(bootstrap: str, configs: dict[str, str]) -> tuple[int, str | None]:
    topic = CreateTopicsRequest.CreatableTopic(
        name=f"tiered-{uuid.uuid4().hex[:8]}", num_partitions=1, replication_factor=1,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])
    with WireClient(bootstrap) as wire:
        result = wire.request(CreateTopicsRequest(timeout_ms=20_000, topics=[topic]), 5).topics[0]
    return result.error_code, result.error_message


def test_remote_storage_is_refused_without_tiered_storage(bootstrap: str) -> None:
    code, message = _create(bootstrap, {"remote.storage.enable": "true"})
    assert code == ErrorCode.INVALID_CONFIG
    assert message is not None and "Tiered Storage functionality is disabled in the broker" in message
    assert _create(bootstrap, {"remote.storage.enable": "false"}) == (0, None)
