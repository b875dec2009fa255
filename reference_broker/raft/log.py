"""The replicated metadata log ``__cluster_metadata-0`` on top of a :class:`PartitionLog`.

Every batch, the leader's included, is written with its final offsets and raft epoch already
in place (``append_as_follower``), so leader and follower logs are byte for byte the same and
the leader epoch cache records where each raft epoch starts: Fetch's diverging-epoch check
answers from it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from reference_broker.log import PartitionLog
from reference_broker.raft.serde import build_control_record_batch, build_data_batch
from sdk.protocol.messages import Message
from sdk.records.batch import RecordBatch, iter_batches

TOPIC = "__cluster_metadata"
PARTITION_DIR = TOPIC + "-0"


class ReplicatedLog:
    """The raft log: appends stamped with epochs, reads up to the end, truncation, HW."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log

    @classmethod
    def open(cls, metadata_log_dir: str | Path) -> ReplicatedLog:
        """Open (creating) ``__cluster_metadata-0`` under ``metadata_log_dir``."""
        return cls(PartitionLog.open(Path(metadata_log_dir) / PARTITION_DIR))

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
        """The epoch of the last batch written (0 for an empty log)."""
        latest = self.log.leader_epoch_cache.latest_epoch
        return 0 if latest is None else latest

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(largest epoch <= epoch, its end offset)``; ``(-1, -1)`` when no such epoch."""
        cache = self.log.leader_epoch_cache
        if cache.latest_epoch is None:
            return (epoch, self.end_offset) if epoch >= 0 else (-1, -1)
        return cache.end_offset_for(epoch, self.end_offset)

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
