"""``SnapshotGenerator``: writes the metadata image as a raft snapshot now and then (Kafka's
``SnapshotGenerator`` publisher).

It is a raft listener registered after the ``MetadataLoader``, so when it sees a committed batch
the loader's image already includes it: the image at that batch's last offset is written with
``image_records`` through ``RaftClient.create_snapshot``. A snapshot is due once
``metadata.log.max.record.bytes.between.snapshots`` bytes of batches were committed since the
last one, or ``metadata.log.max.snapshot.interval.ms`` passed since it while records were
committed. A loaded snapshot counts as the last one. Every node (voter or observer) writes its
own snapshots from its own committed image, as Kafka's nodes do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from reference_broker.metadata.loader import MetadataLoader
from reference_broker.metadata.snapshot import image_records

log = logging.getLogger("reference_broker.metadata")


class SnapshotGenerator:
    def __init__(self, raft: Any, loader: MetadataLoader, *, max_bytes_between: int,
                 max_interval_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        if max_bytes_between < 1:
            raise ValueError("metadata.log.max.record.bytes.between.snapshots must be at least 1")
        self.raft = raft
        self.loader = loader
        self.max_bytes_between = max_bytes_between
        self.max_interval_ms = max_interval_ms
        self._clock = clock
        self.bytes_since_snapshot = 0
        self._last_snapshot_ms = clock() * 1000
        #: snapshots this generator wrote (their end offsets), newest last
        self.written: list[int] = []

    @classmethod
    def attach(cls, raft: Any, loader: MetadataLoader, config: Any) -> SnapshotGenerator:
        """Register a generator configured from the broker config (after ``loader``)."""
        generator = cls(raft, loader,
                        max_bytes_between=config.get("metadata.log.max.record.bytes.between.snapshots"),
                        max_interval_ms=config.get("metadata.log.max.snapshot.interval.ms"))
        raft.register(generator)
        return generator

    def _due(self, now_ms: float) -> bool:
        if self.bytes_since_snapshot >= self.max_bytes_between:
            return True
        return (self.max_interval_ms > 0 and self.bytes_since_snapshot > 0
                and now_ms - self._last_snapshot_ms >= self.max_interval_ms)

    # -- RaftListener ----------------------------------------------------------------------------
    def handle_commit(self, batch: Any) -> None:
        self.bytes_since_snapshot += max(0, int(getattr(batch, "size_in_bytes", 0)))
        now_ms = self._clock() * 1000
        if not self._due(now_ms):
            return
        image = self.loader.image
        if image.offset != batch.last_offset:
            return  # the loader did not take this batch (it is registered after us?): wait
        try:
            writer = self.raft.create_snapshot(image.offset, batch.epoch,
                                               getattr(batch, "append_timestamp_ms", -1))
            if writer is not None:
                writer.append(image_records(image))
                writer.freeze()
                self.written.append(image.offset + 1)
                log.info("metadata snapshot written up to offset %d (epoch %d)", image.offset,
                         batch.epoch)
        except Exception:
            log.exception("writing the metadata snapshot up to offset %d failed", image.offset)
        self.bytes_since_snapshot = 0
        self._last_snapshot_ms = now_ms

    def handle_load_snapshot(self, snapshot: Any) -> None:
        self.bytes_since_snapshot = 0
        self._last_snapshot_ms = self._clock() * 1000

    def handle_leader_change(self, leader: Any) -> None:
        return None
