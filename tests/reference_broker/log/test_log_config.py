"""LogConfig: Kafka names, defaults, validation messages."""

from __future__ import annotations

import re

import pytest

from reference_broker.log import LogConfig
from reference_broker.log.config import LONG_MAX


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1024**3
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.retention_bytes == -1
    assert config.max_message_bytes == 1048588
    assert config.index_interval_bytes == 4096
    assert config.segment_index_bytes == 10 * 1024 * 1024
    assert config.flush_interval_messages == LONG_MAX
    assert config.flush_interval_ms == LONG_MAX
    assert config.message_timestamp_type == "CreateTime"
    assert config.cleanup_policy == ("delete",)
    assert config.producer_id_expiration_ms == 86_400_000


def test_topic_level_names_map_to_fields() -> None:
    config = LogConfig.from_properties({
        "segment.bytes": "2097152", "segment.ms": "60000", "retention.ms": "-1",
        "retention.bytes": "1000000", "max.message.bytes": " 5000 ", "flush.messages": "1",
        "flush.ms": "100", "message.timestamp.type": "LogAppendTime",
        "cleanup.policy": "compact,delete", "index.interval.bytes": "0",
    })
    assert config.segment_bytes == 2097152
    assert config.segment_ms == 60000
    assert config.retention_ms == -1
    assert config.retention_bytes == 1_000_000
    assert config.max_message_bytes == 5000
    assert config.flush_interval_messages == 1
    assert config.flush_interval_ms == 100
    assert config.log_append_time
    assert config.cleanup_policy == ("compact", "delete")
    assert config.compacted and config.delete_enabled
    assert config.index_interval_bytes == 0


def test_overrides_apply_on_top_of_a_base() -> None:
    base = LogConfig(segment_bytes=4096, retention_ms=10)
    config = LogConfig.from_properties({"retention.ms": "20", "segment.ms": None}, base)
    assert (config.segment_bytes, config.retention_ms) == (4096, 20)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "1048575"),
        ("segment.bytes", "abc"),
        ("segment.bytes", str(2**31)),
        ("retention.ms", "-2"),
        ("segment.ms", "0"),
        ("flush.messages", "0"),
        ("max.message.bytes", "-1"),
        ("message.timestamp.type", "WallClock"),
        ("cleanup.policy", "forever"),
        ("compression.type", "brotli"),
    ],
)
def test_invalid_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=rf"configuration {re.escape(key)}"):
        LogConfig.from_properties({key: value})


def test_unknown_key_is_rejected_and_passthrough_keys_are_kept() -> None:
    with pytest.raises(ValueError, match=r"Unknown topic config name: segment\.size"):
        LogConfig.from_properties({"segment.size": "1"})
    config = LogConfig.from_properties({"min.insync.replicas": "2", "compression.type": "zstd"})
    assert config.extra == {"min.insync.replicas": "2", "compression.type": "zstd"}
    assert config.to_properties()["min.insync.replicas"] == "2"


def test_round_trip_through_properties() -> None:
    config = LogConfig.from_properties({"segment.bytes": "1234567", "cleanup.policy": "compact"})
    assert LogConfig.from_properties(config.to_properties()) == config


def test_broker_properties_and_unit_precedence() -> None:
    config = LogConfig.from_broker_properties({
        "log.segment.bytes": "4194304", "log.retention.hours": "1", "log.retention.minutes": "2",
        "message.max.bytes": "999", "log.roll.hours": "3", "unrelated.key": "x",
        "producer.id.expiration.ms": "5000",
    })
    assert config.segment_bytes == 4194304
    assert config.retention_ms == 2 * 60_000
    assert config.max_message_bytes == 999
    assert config.segment_ms == 3 * 3_600_000
    assert config.producer_id_expiration_ms == 5000
    assert LogConfig.from_broker_properties({"log.retention.ms": "7", "log.retention.hours": "1"}
                                            ).retention_ms == 7
    with pytest.raises(ValueError, match=r"log\.segment\.bytes"):
        LogConfig.from_broker_properties({"log.segment.bytes": "x"})


def test_compaction_settings_have_kafkas_names_defaults_and_bounds() -> None:
    config = LogConfig()
    assert (config.delete_retention_ms, config.min_compaction_lag_ms, config.max_compaction_lag_ms,
            config.min_cleanable_dirty_ratio) == (86_400_000, 0, LONG_MAX, 0.5)
    topic = LogConfig.from_properties({
        "delete.retention.ms": "5", "min.compaction.lag.ms": "6", "max.compaction.lag.ms": "7",
        "min.cleanable.dirty.ratio": "0.25"})
    assert (topic.delete_retention_ms, topic.min_compaction_lag_ms, topic.max_compaction_lag_ms,
            topic.min_cleanable_dirty_ratio) == (5, 6, 7, 0.25)
    assert topic.to_properties()["min.cleanable.dirty.ratio"] == "0.25"
    broker = LogConfig.from_broker_properties({
        "log.cleaner.delete.retention.ms": "8", "log.cleaner.min.cleanable.ratio": "0.1"})
    assert (broker.delete_retention_ms, broker.min_cleanable_dirty_ratio) == (8, 0.1)
    with pytest.raises(ValueError, match=re.escape("min.cleanable.dirty.ratio: Value must be in")):
        LogConfig.from_properties({"min.cleanable.dirty.ratio": "1.5"})
    with pytest.raises(ValueError, match=re.escape("max.compaction.lag.ms")):
        LogConfig.from_properties({"max.compaction.lag.ms": "0"})
