"""The KIP-848 settings are checked at start-up against their bounds, as Kafka checks them."""

from __future__ import annotations

import pytest

from reference_broker.config import BrokerConfig, ConfigError
from reference_broker.coordinator.group.service import consumer_group_config


def _config(**properties: object) -> BrokerConfig:
    return BrokerConfig.build("/unused", properties=properties)


def test_kafka_defaults() -> None:
    settings = consumer_group_config(_config())
    assert (settings.heartbeat_interval_ms, settings.session_timeout_ms) == (5000, 45000)
    assert settings.assignors == ("uniform", "range")


@pytest.mark.parametrize(
    "properties",
    [
        {"group.consumer.session.timeout.ms": 6000},
        {"group.consumer.heartbeat.interval.ms": 20000},
        {
            "group.consumer.session.timeout.ms": 6000,
            "group.consumer.min.session.timeout.ms": 6000,
            "group.consumer.heartbeat.interval.ms": 6000,
            "group.consumer.min.heartbeat.interval.ms": 1000,
        },
        {"group.consumer.assignors": "uniform,sticky"},
        {"group.coordinator.rebalance.protocols": "consumer"},
        {"group.coordinator.rebalance.protocols": "classic,share"},
    ],
)
def test_settings_outside_their_bounds_are_refused(properties: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=r"^group\.(consumer|coordinator)"):
        consumer_group_config(_config(**properties))


def test_the_assignor_order_chooses_the_default() -> None:
    assert consumer_group_config(_config(**{"group.consumer.assignors": "range,uniform"})).assignors == (
        "range",
        "uniform",
    )
