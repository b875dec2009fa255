"""The group coordinator service on a real Storage (no sockets): __consumer_offsets created on
first use, records replayed at start-up with COORDINATOR_LOAD_IN_PROGRESS until each partition is
read, and the storage adapter's coordinator appends."""

from __future__ import annotations

import asyncio
from pathlib import Path

from reference_broker.clock import ManualClock
from reference_broker.config import BrokerConfig
from reference_broker.coordinator.group import records
from reference_broker.coordinator.group.service import LOAD_STEP_RECORDS, GroupCoordinatorService
from reference_broker.coordinator.group.state import CommittedOffset
from reference_broker.storage import CONSUMER_OFFSETS, Storage, is_internal
from sdk.protocol.errors import ErrorCode as E
from sdk.records import ControlType, iter_batches


def open_service(data_dir: Path) -> tuple[Storage, GroupCoordinatorService]:
    config = BrokerConfig.build(data_dir, properties={"offsets.topic.num.partitions": 4})
    storage = Storage.open(config)
    return storage, GroupCoordinatorService(config, storage, ManualClock())


async def test_offsets_are_written_to_consumer_offsets_and_loaded_after_reopen(tmp_path: Path) -> None:
    storage, service = open_service(tmp_path)
    await service.start()
    assert storage.topic(CONSUMER_OFFSETS) is None  # created on first use, as Kafka does
    storage.create_topic("events", 2, {})
    coordinator = service.coordinator
    now = coordinator.clock.now_ms()
    assert coordinator.commit_offsets(
        "g", -1, "", None, {("events", 1): CommittedOffset(9, 2, "m", now)}
    ) == {("events", 1): 0}
    meta = storage.topic(CONSUMER_OFFSETS)
    assert meta is not None and meta.num_partitions == 4 and is_internal(CONSUMER_OFFSETS)
    assert storage.topic_config(CONSUMER_OFFSETS).compacted
    partition = records.partition_for("g", 4)
    stored = [r for b in storage.read_batches(CONSUMER_OFFSETS, partition) for r in b]
    assert records.parse_key(stored[0].key) == records.OffsetKey("g", "events", 1)
    assert records.parse_offset_value(stored[0].value).offset == 9
    await service.stop()
    storage.close()

    storage, service = open_service(tmp_path)
    await service.start()
    assert service.coordinator.loading == {0, 1, 2, 3}
    assert service.coordinator.fetch_offsets("g", None)[0] == E.COORDINATOR_LOAD_IN_PROGRESS
    await service.wait_loaded()
    error, found = service.coordinator.fetch_offsets("g", None)
    assert error == 0 and found[("events", 1)][0] == CommittedOffset(9, 2, "m", now)
    await service.stop()
    storage.close()


def test_control_batch_append(tmp_path: Path) -> None:
    config = BrokerConfig.build(tmp_path)
    storage = Storage.open(config)
    try:
        storage.create_topic("txn-data", 1, {})
        result = storage.append_control_batch("txn-data", 0, ControlType.COMMIT, 7, 0, 3)
        batch = next(
            iter_batches(storage.read("txn-data", 0, 0, 1 << 20, min_one=True, committed=False).records)
        )
        assert result.base_offset == 0 and batch.is_control and batch.producer_id == 7
        assert batch.control_record().coordinator_epoch == 3
    finally:
        storage.close()


async def test_a_large_partition_is_loaded_in_steps_that_let_other_work_run(tmp_path: Path) -> None:
    """Loading replays a partition a step at a time: work queued on the event loop meanwhile runs
    while the partition is still loading (and its groups answer COORDINATOR_LOAD_IN_PROGRESS)."""
    config = BrokerConfig.build(tmp_path, properties={"offsets.topic.num.partitions": 1})
    storage = Storage.open(config)
    service = GroupCoordinatorService(config, storage, ManualClock())
    storage.create_topic("events", 1, {})
    coordinator = service.coordinator
    now = coordinator.clock.now_ms()
    commits = 5 * LOAD_STEP_RECORDS
    for i in range(0, commits, 500):  # 500 commits for each of 20 groups
        group = f"g{i}"
        for j in range(i, i + 500):
            offsets = {("events", 0): CommittedOffset(j, -1, "", now)}
            assert coordinator.commit_offsets(group, -1, "", None, offsets) == {("events", 0): 0}
    await service.stop()
    storage.close()

    storage = Storage.open(config)
    service = GroupCoordinatorService(config, storage, ManualClock())
    seen_while_loading: list[int] = []

    async def other_client() -> None:
        seen_while_loading.append(service.coordinator.fetch_offsets("g0", None)[0])

    await service.start()
    other = asyncio.create_task(other_client())
    await service.wait_loaded()
    await other
    assert seen_while_loading == [E.COORDINATOR_LOAD_IN_PROGRESS]
    error, found = service.coordinator.fetch_offsets("g500", None)
    assert error == 0 and found[("events", 0)][0].offset == 999
    await service.stop()
    storage.close()
