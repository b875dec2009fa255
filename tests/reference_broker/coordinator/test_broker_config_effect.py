"""Broker keys that name something the broker decides otherwise are refused at start, never
ignored: ``log.dirs`` / ``log.dir`` other than the data directory, and KIP-848 session and
heartbeat settings outside their ``group.consumer.min/max`` bounds (Kafka's
GroupCoordinatorConfig checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reference_broker.config import BrokerConfig, ConfigError
from reference_broker.testing import BrokerProcess, BrokerStartError


@pytest.mark.parametrize("key", ["log.dirs", "log.dir"])
def test_a_data_directory_other_than_the_data_dir_is_refused(tmp_path: Path, key: str) -> None:
    data = tmp_path / "data"
    with pytest.raises(ConfigError, match=rf"^{key.replace('.', '[.]')}: .* is not the data directory"):
        BrokerConfig.build(data, properties={key: str(tmp_path / "elsewhere")})
    with pytest.raises(ConfigError, match="one directory"):
        BrokerConfig.build(data, properties={key: f"{data},{tmp_path / 'second'}"})
    same = BrokerConfig.build(data, properties={key: str(tmp_path / "." / "data")})
    assert same.data_dir == data


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"log.dirs": "/var/lib/kafka/data"}, "log.dirs: '/var/lib/kafka/data' is not the data directory"),
        ({"group.consumer.session.timeout.ms": 70000},
         "group.consumer.session.timeout.ms: 70000 is outside group.consumer.min.session.timeout.ms"),
        ({"group.consumer.heartbeat.interval.ms": 4000},
         "group.consumer.heartbeat.interval.ms: 4000 is outside group.consumer.min.heartbeat.interval.ms"),
        ({"group.consumer.max.heartbeat.interval.ms": 4000},
         "group.consumer.heartbeat.interval.ms: 5000 is outside"),
    ],
)
def test_the_broker_process_refuses_to_start(properties: dict[str, object], message: str) -> None:
    broker = BrokerProcess(config=properties)
    try:
        with pytest.raises(BrokerStartError, match="exited with code") as failure:
            broker.start()
        assert message in str(failure.value)
    finally:
        broker.stop()
