"""LogManager: topic lifecycle, discovery after restart, metadata files, periodic work."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from reference_broker.log import LogConfig, LogManager
from reference_broker.log.log_manager import topic_id_from_string, topic_id_to_string
from sdk.protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

DEFAULTS = LogConfig(segment_bytes=1_000, retention_ms=-1)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def managers(data_dir: Path):
    opened: list[LogManager] = []

    def factory(**kwargs: object) -> LogManager:
        kwargs.setdefault("now_ms", 0)
        manager = LogManager(data_dir, DEFAULTS, **kwargs)  # type: ignore[arg-type]
        opened.append(manager)
        return manager

    yield factory
    for manager in opened:
        manager.close()


def test_create_write_restart_and_discover(managers, data_dir, make_batch):
    manager = managers(node_id=3)
    meta = manager.create_topic("orders-eu-west", 3, {"retention.ms": "1000"})
    manager.create_topic("a-1", 2)  # names with '-' and digits: split on the last '-'
    for p in range(3):
        manager.get_log("orders-eu-west", p).append(make_batch(p + 1), now_ms=0)
    manager.get_log("a-1", 1).append(make_batch(4), now_ms=0)
    cluster_id = manager.cluster_id
    manager.close()
    assert (data_dir / "meta.properties").read_text().count("node.id=3") == 1
    assert (data_dir / "orders-eu-west-2" / "partition.metadata").exists()

    again = managers(node_id=3)
    assert again.cluster_id == cluster_id
    assert set(again.topics()) == {"orders-eu-west", "a-1"}
    restored = again.topic("orders-eu-west")
    assert restored == meta and restored.configs == {"retention.ms": "1000"}
    assert again.topic_by_id(meta.topic_id) == meta
    assert again.topic_config("orders-eu-west").retention_ms == 1000
    assert again.topic_config("a-1").retention_ms == -1
    assert [again.get_log("orders-eu-west", p).log_end_offset for p in range(3)] == [1, 2, 3]
    assert again.get_log("a-1", 1).log_end_offset == 4
    assert again.get_log("a-1", 0).log_end_offset == 0


def test_meta_properties_must_match(managers):
    managers(node_id=1, cluster_id="abc").close()
    with pytest.raises(ValueError, match=r"node\.id"):
        managers(node_id=2)
    with pytest.raises(ValueError, match=r"cluster\.id"):
        managers(node_id=1, cluster_id="other")
    assert managers(node_id=1).cluster_id == "abc"


def test_topic_validation_errors(managers):
    manager = managers()
    manager.create_topic("t.x", 1)
    with pytest.raises(TopicAlreadyExistsError):
        manager.create_topic("t.x", 1)
    with pytest.raises(InvalidTopicError):
        manager.create_topic("t_x", 1)  # collides with t.x
    for bad in ("", ".", "..", "a/b", "x" * 250, "spaces here"):
        with pytest.raises(InvalidTopicError):
            manager.create_topic(bad, 1)
    with pytest.raises(InvalidPartitionsError):
        manager.create_topic("zero", 0)
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes"):
        manager.create_topic("badcfg", 1, {"segment.bytes": "x"})
    with pytest.raises(InvalidConfigError, match="Unknown topic config"):
        manager.create_topic("badcfg", 1, {"no.such.key": "1"})
    assert manager.topic("badcfg") is None
    assert manager.create_topic("checked", 2, validate_only=True).num_partitions == 2
    assert manager.topic("checked") is None
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.get_log("t.x", 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.delete_topic("nope")


def test_delete_topic_removes_everything(managers, data_dir, make_batch):
    manager = managers()
    manager.create_topic("gone", 2)
    manager.get_log("gone", 0).append(make_batch(), now_ms=0)
    manager.delete_topic("gone")
    assert manager.topic("gone") is None
    waiting = [p.name for p in data_dir.iterdir() if p.name.startswith("gone")]
    assert len(waiting) == 2 and all(name.endswith("-delete") for name in waiting)  # file.delete.delay.ms
    assert manager.deletions.run_all() == 2
    assert not any(p.name.startswith("gone") for p in data_dir.iterdir())
    manager.close()
    again = managers()
    assert again.topics() == {}
    again.create_topic("gone", 1)  # the name can be reused
    assert again.get_log("gone", 0).log_end_offset == 0


def test_create_partitions(managers):
    manager = managers()
    manager.create_topic("grow", 2)
    with pytest.raises(InvalidPartitionsError):
        manager.create_partitions("grow", 2)
    manager.create_partitions("grow", 5)
    assert manager.topic("grow").num_partitions == 5
    assert manager.get_log("grow", 4).log_end_offset == 0
    manager.close()
    assert managers().topic("grow").num_partitions == 5


def test_update_topic_config_persists_and_applies(managers):
    manager = managers()
    manager.create_topic("cfg", 2, {"retention.ms": "5000", "segment.bytes": "2000000"})
    manager.update_topic_config("cfg", {"retention.ms": "10", "max.message.bytes": None})
    assert manager.topic("cfg").configs == {"retention.ms": "10", "segment.bytes": "2000000"}
    assert manager.get_log("cfg", 1).config.retention_ms == 10
    manager.update_topic_config("cfg", {"cleanup.policy": "compact"}, replace=True)
    assert manager.topic("cfg").configs == {"cleanup.policy": "compact"}
    assert manager.get_log("cfg", 0).config.segment_bytes == DEFAULTS.segment_bytes
    with pytest.raises(InvalidConfigError):
        manager.update_topic_config("cfg", {"retention.ms": "-5"})
    manager.close()
    assert managers().topic_config("cfg").compacted


def test_stray_and_deleted_directories_after_a_crash(managers, data_dir, make_batch):
    manager = managers()
    manager.create_topic("keep", 1)
    manager.close()
    stray = data_dir / "unknown-0"
    stray.mkdir()
    (stray / "00000000000000000000.log").write_bytes(make_batch())
    beyond = data_dir / "keep-7"  # partition the topic does not have
    beyond.mkdir()
    leftover = data_dir / "old-0.0123abcd-delete"
    leftover.mkdir()
    mismatched = data_dir / "keep-0" / "partition.metadata"
    again = managers()
    assert set(again.topics()) == {"keep"}
    assert leftover.exists()  # removed after log.segment.delete.delay.ms, as Kafka does
    again.deletions.run_all()
    assert not stray.exists() and not beyond.exists() and not leftover.exists()
    strays = [p.name for p in data_dir.iterdir() if p.name.endswith("-stray")]
    assert len(strays) == 2  # quarantined, not deleted
    again.close()
    mismatched.write_text(f"version: 0\ntopic_id: {topic_id_to_string(uuid.uuid4())}\n")
    third = managers()
    assert third.get_log("keep", 0).log_end_offset == 0  # recreated empty, old dir quarantined
    assert len([p for p in data_dir.iterdir() if p.name.endswith("-stray")]) == 3


def test_run_periodic_applies_retention_and_flushes(managers, make_batch):
    manager = managers()
    manager.create_topic("old", 1, {"retention.ms": "1000", "internal.segment.bytes": "500"})
    plog = manager.get_log("old", 0)
    for i in range(20):
        plog.append(make_batch(ts=1_000 + i, tag=i), now_ms=0)
    assert len(plog.segments) > 2
    manager.run_periodic(now_ms=1_500)
    assert plog.recovery_point == plog.active_segment.base_offset
    assert manager.run_retention(now_ms=100_000) > 0
    assert plog.log_start_offset == plog.log_end_offset == 20


def test_segment_bytes_below_the_kafka_4_floor_is_refused_and_stored_ones_still_load(
    managers, data_dir, make_batch
):
    manager = managers()
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes"):
        manager.create_topic("tiny", 1, {"segment.bytes": "500"})
    manager.create_topic("legacy", 1, {"retention.ms": "-1"})
    manager.get_log("legacy", 0).append(make_batch(tag=1), now_ms=0)
    manager.close()
    # A topic written before the floor existed: its small segment.bytes must not lose the topic.
    path = next((data_dir / ".topics").glob("legacy*.json"))
    stored = json.loads(path.read_text())
    stored["configs"]["segment.bytes"] = "500"
    path.write_text(json.dumps(stored))
    again = managers()
    assert again.topic_config("legacy").segment_size == 500
    assert again.topic("legacy").configs == {"retention.ms": "-1", "internal.segment.bytes": "500"}
    assert again.get_log("legacy", 0).log_end_offset == 1
    again.close()


def test_topic_id_text_form_round_trips() -> None:
    value = uuid.uuid4()
    text = topic_id_to_string(value)
    assert len(text) == 22 and topic_id_from_string(text) == value
    assert topic_id_from_string(str(value)) == value


def test_producer_ids_expire_in_bounded_steps_that_cover_every_log(managers, make_batch):
    """With a budget, one call looks at about that many producers (whole logs), and successive
    calls resume where the last stopped until every log was visited."""
    manager = managers()
    manager.create_topic("idem", 10, {})
    for partition in range(10):
        plog = manager.get_log("idem", partition)
        for pid in range(100):
            plog.append(make_batch(pid=1000 * partition + pid, epoch=0, seq=0), now_ms=0)
    expiry_ms = manager.topic_config("idem").producer_id_expiration_ms + 10_000
    producers = lambda: sum(len(manager.get_log("idem", p).producer_state.producers) for p in range(10))  # noqa: E731
    assert producers() == 1000
    assert manager.remove_expired_producers(now_ms=expiry_ms, budget=250) == 300  # three logs of 100
    assert producers() == 700
    while producers():
        assert manager.remove_expired_producers(now_ms=expiry_ms, budget=250) > 0
