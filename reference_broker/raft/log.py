"""The replicated metadata log ``__cluster_metadata-0`` on top of a :class:`PartitionLog`.

Every batch, the leader's included, is written with its final offsets and raft epoch already
in place (``append_as_follower``), so leader and follower logs are byte for byte the same and
the leader epoch cache records where each raft epoch starts: Fetch's diverging-epoch check
answers from it.

Snapshots (``raft.snapshot``) sit in the same directory. The log may start after offset 0 only at
a snapshot's end offset: segments are deleted only up to a snapshot (never past the latest), and a
follower that downloads a snapshot beyond its log restarts the log empty at its end offset. With
the log empty, the snapshot's epoch is the last fetched epoch (Kafka's KafkaMetadataLog).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reference_broker.log import PartitionLog
from reference_broker.log.config import LogConfig
from reference_broker.raft.serde import build_control_record_batch, build_data_batch
from reference_broker.raft.snapshot import (
    SnapshotId,
    SnapshotReader,
    SnapshotWriter,
    scan_snapshots,
    snapshot_path,
)
from sdk.protocol.messages import Message
from sdk.records.batch import RecordBatch, iter_batches

TOPIC = "__cluster_metadata"


@dataclass(frozen=True)
class MetadataLogSettings:
    """``metadata.log.segment.bytes`` and ``metadata.max.retention.*`` (Kafka's defaults)."""

    segment_bytes: int = 1 << 30
    retention_bytes: int = 100 * 1024 * 1024
    retention_ms: int = 7 * 24 * 3600 * 1000

    @classmethod
    def from_config(cls, config: Any) -> MetadataLogSettings:
        return cls(config.get("metadata.log.segment.bytes"),
                   config.get("metadata.max.retention.bytes"),
                   config.get("metadata.max.retention.ms"))
PARTITION_DIR = TOPIC + "-0"


class ReplicatedLog:
    """The raft log: appends stamped with epochs, reads up to the end, truncation, HW."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        #: the complete snapshots on disk, oldest first
        self.snapshots: list[SnapshotId] = scan_snapshots(log.directory)
        self.truncate_to_latest_snapshot()

    @classmethod
    def open(cls, metadata_log_dir: str | Path, *, segment_bytes: int | None = None) -> ReplicatedLog:
        """Open (creating) ``__cluster_metadata-0`` under ``metadata_log_dir``. Segments are
        deleted by snapshots only, never by time or size retention of the log itself."""
        config = LogConfig(retention_ms=-1, retention_bytes=-1)
        if segment_bytes is not None:
            config = LogConfig(retention_ms=-1, retention_bytes=-1, segment_bytes=segment_bytes)
        return cls(PartitionLog.open(Path(metadata_log_dir) / PARTITION_DIR, config))

    @property
    def directory(self) -> Path:
        return self.log.directory

    @property
    def start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_fetched_epoch(self) -> int:
        """The epoch of the last batch written; with no batch, the latest snapshot's (else 0)."""
        latest = self.log.leader_epoch_cache.latest_epoch
        if latest is not None:
            return latest
        return self.snapshots[-1].epoch if self.snapshots else 0

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(largest epoch <= epoch, its end offset)``; ``(-1, -1)`` when no such epoch. An
        epoch older than the log's first one answers the snapshot at the log start."""
        cache = self.log.leader_epoch_cache
        if cache.latest_epoch is None:
            return (self.last_fetched_epoch, self.end_offset) if epoch >= 0 else (-1, -1)
        found = cache.end_offset_for(epoch, self.end_offset)
        earliest = self.earliest_snapshot
        if (earliest is not None and found[1] == earliest.end_offset and found[0] < earliest.epoch):
            return earliest.epoch, earliest.end_offset
        return found

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> tuple[str, int, int]:
        """Kafka's ``validateOffsetAndEpoch`` of a Fetch position: ``("valid", offset, epoch)``,
        ``("diverging", end offset, epoch)`` to truncate to, or ``("snapshot", end offset,
        epoch)`` of the latest snapshot when the position is before the log start."""
        start = self.start_offset
        if start == 0 and offset == 0:
            return "valid", 0, 0
        earliest = self.earliest_snapshot
        if earliest is not None and (offset < start or (offset == start and epoch != earliest.epoch)
                                     or epoch < earliest.epoch):
            latest = self.snapshots[-1]
            return "snapshot", latest.end_offset, latest.epoch
        end_epoch, end_offset = self.end_offset_for_epoch(epoch)
        if end_epoch != epoch or end_offset < offset:
            return "diverging", max(end_offset, 0), end_epoch
        return "valid", offset, epoch

    # -- snapshots -----------------------------------------------------------------------------

    @property
    def earliest_snapshot(self) -> SnapshotId | None:
        return self.snapshots[0] if self.snapshots else None

    @property
    def latest_snapshot(self) -> SnapshotId | None:
        return self.snapshots[-1] if self.snapshots else None

    def snapshot_writer(self, snapshot_id: SnapshotId, last_contained_log_timestamp: int) -> SnapshotWriter:
        return SnapshotWriter(self.directory, snapshot_id, last_contained_log_timestamp,
                              on_freeze=self.snapshot_added)

    def snapshot_added(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self.snapshots:
            self.snapshots.append(snapshot_id)
            self.snapshots.sort()

    def read_snapshot(self, snapshot_id: SnapshotId) -> SnapshotReader:
        return SnapshotReader.open(self.directory, snapshot_id)

    def snapshot_chunk(self, snapshot_id: SnapshotId, position: int,
                       max_bytes: int) -> tuple[int, bytes] | None:
        """``(snapshot size, bytes from position)``; None when there is no such snapshot."""
        if snapshot_id not in self.snapshots:
            return None
        try:
            with open(snapshot_path(self.directory, snapshot_id), "rb") as f:
                size = f.seek(0, 2)
                f.seek(max(position, 0))
                return size, f.read(max(0, min(max_bytes, size - position)))
        except FileNotFoundError:
            return None

    def truncate_to_latest_snapshot(self) -> bool:
        """A snapshot beyond the log (downloaded from the leader, or the log lost): restart the
        log empty at its end offset. True if the log was emptied."""
        latest = self.latest_snapshot
        if latest is None:
            return False
        cached = self.log.leader_epoch_cache.latest_epoch
        log_epoch = 0 if cached is None else cached
        if latest.epoch > log_epoch or (latest.epoch == log_epoch
                                        and latest.end_offset > self.end_offset):
            self.restart_at_snapshot(latest)
            return True
        return False

    def restart_at_snapshot(self, snapshot_id: SnapshotId) -> None:
        """Empty the log and start it at ``snapshot_id``'s end (a follower that downloaded it):
        the snapshot is committed, so the high watermark is there too."""
        self.log.truncate_fully_and_start_at(snapshot_id.end_offset)
        self.log.set_high_watermark(snapshot_id.end_offset)
        self._forget_snapshots_before(snapshot_id)

    def delete_before_snapshot(self, snapshot_id: SnapshotId) -> bool:
        """Make ``snapshot_id``'s end offset the log start (it must be a snapshot at most the
        high watermark): segments wholly before it and older snapshots are deleted."""
        if (snapshot_id not in self.snapshots or snapshot_id.end_offset <= self.start_offset
                or snapshot_id.end_offset > self.high_watermark):
            return False
        self.log.delete_records_before(snapshot_id.end_offset)
        self._forget_snapshots_before(snapshot_id)
        return True

    def _forget_snapshots_before(self, snapshot_id: SnapshotId) -> None:
        for old in [s for s in self.snapshots if s < snapshot_id]:
            self.snapshots.remove(old)
            snapshot_path(self.directory, old).unlink(missing_ok=True)

    def clean(self, retention_bytes: int, retention_ms: int, now_ms: int) -> bool:
        """Kafka's ``maybeClean``: while the log plus snapshots exceed ``retention_bytes``, or the
        oldest snapshot is older than ``retention_ms`` (its header timestamp), drop it and move
        the log start to the next snapshot. The latest snapshot always stays."""
        cleaned = False
        while len(self.snapshots) >= 2:
            oldest, following = self.snapshots[0], self.snapshots[1]
            over_size = retention_bytes >= 0 and self._total_bytes() > retention_bytes
            too_old = retention_ms >= 0 and self._timestamp(oldest) < now_ms - retention_ms
            if not (over_size or too_old):
                break
            if following.end_offset <= self.start_offset:
                self._forget_snapshots_before(following)
            elif not self.delete_before_snapshot(following):
                break
            cleaned = True
        return cleaned

    def _total_bytes(self) -> int:
        total = self.log.size_in_bytes
        for s in self.snapshots:
            path = snapshot_path(self.directory, s)
            total += path.stat().st_size if path.exists() else 0
        return total

    def _timestamp(self, snapshot_id: SnapshotId) -> int:
        try:
            return self.read_snapshot(snapshot_id).last_contained_log_timestamp
        except (OSError, ValueError):
            return 0

    def append_records(self, records: list[Message], epoch: int, now_ms: int) -> tuple[int, int]:
        """Append metadata records as one batch of ``epoch``: ``(base offset, last offset)``."""
        return self._append(build_data_batch(records, base_offset=self.end_offset, epoch=epoch,
                                              timestamp_ms=now_ms), now_ms)

    def append_control(self, message: Message, epoch: int, now_ms: int) -> tuple[int, int]:
        """Append one KRaft control record (LeaderChangeMessage, ...) as its own batch."""
        return self._append(build_control_record_batch(
            message, base_offset=self.end_offset, epoch=epoch, timestamp_ms=now_ms), now_ms)

    def _append(self, batch: bytes, now_ms: int) -> tuple[int, int]:
        result = self.log.append_as_follower(batch, now_ms=now_ms)
        return result.base_offset, result.last_offset

    def append_fetched(self, records: bytes | memoryview, now_ms: int) -> int:
        """Append batches fetched from the leader; the new end offset."""
        if len(records):
            self.log.append_as_follower(records, now_ms=now_ms)
        return self.end_offset

    def read(self, offset: int, max_bytes: int) -> bytes | memoryview:
        """Whole batches from ``offset`` up to the log end (at least one batch)."""
        if offset >= self.end_offset:
            return b""
        return self.log.read(offset, max_bytes, max_offset=self.end_offset).data

    def batches(self, start: int, end: int) -> Iterator[RecordBatch]:
        """The batches holding offsets ``[start, end)``, whole, in order."""
        offset = start
        while offset < end:
            data = self.log.read(offset, 1 << 20, max_offset=end).data
            if not len(data):
                return
            for batch in iter_batches(bytes(data)):
                if batch.last_offset < offset:
                    continue
                if batch.base_offset >= end:
                    return
                yield batch
                offset = batch.last_offset + 1

    def truncate_to(self, offset: int) -> bool:
        return self.log.truncate_to(offset)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def set_high_watermark(self, offset: int) -> None:
        self.log.set_high_watermark(offset)

    def flush(self) -> None:
        self.log.flush()

    def close(self) -> None:
        self.log.close()
