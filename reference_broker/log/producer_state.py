"""Idempotent and transactional producer state of one partition (Kafka's ProducerStateManager).

For every producer id the state keeps the current epoch, the coordinator epoch of its last
transaction marker, the timestamp of its last write, the first offset of its ongoing transaction
and metadata of its last five batches (``first_seq, last_seq, first_offset, last_offset,
timestamp``). The rules, taken from Kafka 3.x (``ProducerAppendInfo``), for appends from clients:

* A batch whose (epoch, first_seq, last_seq) equals one of the five cached batches is a
  **duplicate**: the log answers with the cached offsets and writes nothing.
* Epoch older than the current one -> ``InvalidProducerEpochError`` (since Kafka 2.7 this is the
  produce-path error; ``ProducerFencedError`` is not returned for data).
* A new (higher) epoch must start at sequence 0, else ``OutOfOrderSequenceNumberError``.
* Same epoch: ``first_seq`` must be ``last_seq + 1`` (wrapping from 2**31-1 to 0), else
  ``OutOfOrderSequenceNumberError``.
* **Unknown producer id**: Kafka 2.5+ (KIP-360) accepts any sequence when the broker has no state
  for the producer (e.g. all its data was removed by retention or DeleteRecords and the state
  expired); ``UNKNOWN_PRODUCER_ID`` is no longer returned on produce. That is the default here;
  ``legacy_unknown_producer_id=True`` restores the pre-2.5 error (``UnknownProducerIdError`` for a
  non-zero first sequence) for clients that expect it.
* A non-transactional batch while the producer has an ongoing transaction ->
  ``InvalidTxnStateError``.

Transaction markers (COMMIT/ABORT control batches, written through the coordinator path) check the
producer epoch (``InvalidProducerEpochError`` if older) and the coordinator epoch
(``TransactionCoordinatorFencedError`` if older) and complete the producer's ongoing transaction.
The partition log turns completed aborts into ``.txnindex`` entries and computes the last stable
offset from :attr:`ProducerStateManager.first_unstable_offset`.

Snapshots: ``{offset:020d}.snapshot`` in the partition directory holds the whole state as of
``offset`` (JSON with a CRC-32 line, written atomically). The log writes one on every segment roll
and on clean close, and on open loads the newest usable one and replays batch headers after it.
Producers expire ``producer.id.expiration.ms`` after their last write unless they have an open
transaction (:meth:`ProducerStateManager.remove_expired`), exactly like Kafka.
"""

from __future__ import annotations

import enum
import json
import logging
import zlib
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import NamedTuple

from reference_broker.log._files import atomic_write, remove_quietly
from sdk.protocol.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from sdk.records import ControlType

__all__ = [
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
]

log = logging.getLogger("reference_broker.log")

NUM_BATCHES_TO_RETAIN = 5
_INT32_MAX = (1 << 31) - 1
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_VERSION = 1


class AppendOrigin(enum.Enum):
    """Who is appending, which decides how much is validated (Kafka's ``AppendOrigin``).

    CLIENT: produce requests; full validation, no control batches. COORDINATOR: the broker's own
    coordinators (transaction markers, offset commits); producer epochs are checked but not
    sequences, control batches allowed. REPLICATION: log recovery replay; nothing is rejected.
    """

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


class BatchMetadata(NamedTuple):
    """What is remembered of one of a producer's recent batches, for duplicate detection.

    A named tuple rather than a frozen dataclass: one is created for every idempotent batch
    appended, and building a tuple costs a third of a frozen dataclass's ``__init__``.
    """

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


# Attribute access on an Enum class costs as much as a function call; the append path tests
# the origin several times per batch.
_CLIENT = AppendOrigin.CLIENT
_REPLICATION = AppendOrigin.REPLICATION


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction ended by a marker at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(slots=True)
class ProducerStateEntry:
    """State of one producer id. ``producer_epoch == -1`` means "nothing known"."""

    producer_id: int
    producer_epoch: int = -1
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batches: deque[BatchMetadata] = field(
        default_factory=partial(deque, maxlen=NUM_BATCHES_TO_RETAIN)  # C call, no Python frame
    )

    @property
    def last_seq(self) -> int:
        """Sequence of the last record written, -1 if no batch is cached."""
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        """Offset of the last record written, -1 if no batch is cached."""
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def maybe_update_epoch(self, epoch: int) -> None:
        """A new epoch forgets the old epoch's batches."""
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, meta: BatchMetadata) -> None:
        """Remember a written batch (keeping the last five)."""
        self.maybe_update_epoch(epoch)
        self.batches.append(meta)
        self.last_timestamp = meta.timestamp

    def copy_without_batches(self) -> ProducerStateEntry:
        """The staging copy an append starts from (Kafka's ``withProducerId``)."""
        return ProducerStateEntry(
            self.producer_id, self.producer_epoch, self.coordinator_epoch,
            self.last_timestamp, self.current_txn_first_offset,
        )

    def merge(self, staged: ProducerStateEntry) -> None:
        """Apply a staged entry after its append was written."""
        self.maybe_update_epoch(staged.producer_epoch)
        self.batches.extend(staged.batches)
        self.coordinator_epoch = staged.coordinator_epoch
        self.current_txn_first_offset = staged.current_txn_first_offset
        self.last_timestamp = staged.last_timestamp

    def to_json(self) -> dict:
        """Snapshot form."""
        return {
            "producer_id": self.producer_id,
            "epoch": self.producer_epoch,
            "coordinator_epoch": self.coordinator_epoch,
            "last_timestamp": self.last_timestamp,
            "txn_first_offset": self.current_txn_first_offset,
            "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp]
                        for b in self.batches],
        }

    @classmethod
    def from_json(cls, data: dict) -> ProducerStateEntry:
        """Inverse of :meth:`to_json`."""
        entry = cls(int(data["producer_id"]), int(data["epoch"]), int(data["coordinator_epoch"]),
                    int(data["last_timestamp"]), data["txn_first_offset"])
        entry.batches.extend(BatchMetadata(*map(int, b)) for b in data["batches"])
        return entry


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


class ProducerAppendInfo:
    """Validates one producer's batches in one append against its state, staging the update."""

    __slots__ = ("current", "legacy_unknown_producer_id", "origin", "producer_id",
                 "started_txn_first_offsets", "updated")

    def __init__(
        self,
        producer_id: int,
        current: ProducerStateEntry | None,
        origin: AppendOrigin,
        *,
        legacy_unknown_producer_id: bool = False,
    ):
        self.producer_id = producer_id
        self.current = current or ProducerStateEntry(producer_id)
        self.origin = origin
        self.legacy_unknown_producer_id = legacy_unknown_producer_id
        self.updated = self.current.copy_without_batches()
        self.started_txn_first_offsets: list[int] = []

    def _check_epoch(self, epoch: int, offset: int) -> None:
        if epoch < self.updated.producer_epoch and self.origin is not _REPLICATION:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {self.producer_id} at offset {offset} is older than"
                f" the last seen epoch {self.updated.producer_epoch}"
            )

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        pid = self.producer_id
        if epoch != self.updated.producer_epoch:
            if first_seq != 0:
                if self.updated.producer_epoch != -1:
                    raise OutOfOrderSequenceNumberError(
                        f"new epoch {epoch} of producer {pid} at offset {offset} starts at sequence"
                        f" {first_seq}, not 0 (current epoch {self.updated.producer_epoch})"
                    )
                if self.legacy_unknown_producer_id:
                    raise UnknownProducerIdError(
                        f"no state for producer {pid} at offset {offset} (sequence {first_seq});"
                        " its data may have been removed by retention"
                    )
            return
        if self.updated.batches:
            last_seq = self.updated.last_seq
        elif epoch == self.current.producer_epoch:
            last_seq = self.current.last_seq
        else:
            last_seq = -1
        if self.current.producer_epoch != -1 and not _in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceNumberError(
                f"out of order sequence for producer {pid} at offset {offset}: {first_seq}"
                f" (incoming), {last_seq} (current end sequence)"
            )

    def append_data_batch(
        self,
        epoch: int,
        first_seq: int,
        last_seq: int,
        timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        """Validate and stage a data batch (raises the Kafka error for a bad one)."""
        self._check_epoch(epoch, first_offset)
        if self.origin is _CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        self.updated.add_batch(
            epoch, BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp)
        )
        ongoing = self.updated.current_txn_first_offset
        if ongoing is not None and not is_transactional:
            if self.origin is not _REPLICATION:
                raise InvalidTxnStateError(
                    f"non-transactional write from producer {self.producer_id} at offset"
                    f" {first_offset} while its transaction from offset {ongoing} is open"
                )
        elif ongoing is None and is_transactional:
            self.updated.current_txn_first_offset = first_offset
            self.started_txn_first_offsets.append(first_offset)

    def append_end_txn_marker(
        self, control_type: int, coordinator_epoch: int, epoch: int, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        """Validate and stage a COMMIT/ABORT marker; the transaction it ends, if one was open."""
        self._check_epoch(epoch, offset)
        if (
            coordinator_epoch < self.updated.coordinator_epoch
            and self.origin is not _REPLICATION
        ):
            raise TransactionCoordinatorFencedError(
                f"marker for producer {self.producer_id} at offset {offset} has coordinator epoch"
                f" {coordinator_epoch}, older than {self.updated.coordinator_epoch}"
            )
        first = self.updated.current_txn_first_offset
        completed = None
        if first is not None:
            completed = CompletedTxn(
                self.producer_id, first, offset, control_type == ControlType.ABORT
            )
        self.updated.maybe_update_epoch(epoch)
        self.updated.coordinator_epoch = coordinator_epoch
        self.updated.current_txn_first_offset = None
        self.updated.last_timestamp = timestamp
        return completed


class ProducerStateManager:
    """All producer entries of one partition, the ongoing transactions and the snapshots."""

    def __init__(
        self,
        directory: Path,
        *,
        producer_id_expiration_ms: int = 86_400_000,
        legacy_unknown_producer_id: bool = False,
    ):
        self.directory = directory
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.legacy_unknown_producer_id = legacy_unknown_producer_id
        self.producers: dict[int, ProducerStateEntry] = {}
        #: first offset of an ongoing transaction -> producer id
        self.ongoing_txns: dict[int, int] = {}
        #: the state reflects the log up to (excluding) this offset
        self.map_end_offset = 0

    # -- append path ---------------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """Committed state of ``producer_id``."""
        return self.producers.get(producer_id)

    def find_duplicate(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """The cached batch a client retry duplicates, if any."""
        entry = self.producers.get(producer_id)
        return entry.find_duplicate(epoch, first_seq, last_seq) if entry else None

    def prepare(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        """Start validating an append of ``producer_id``'s batches."""
        return ProducerAppendInfo(
            producer_id, self.producers.get(producer_id), origin,
            legacy_unknown_producer_id=self.legacy_unknown_producer_id,
        )

    def update(self, info: ProducerAppendInfo) -> None:
        """Commit a staged append (after its batches were written)."""
        current = self.producers.get(info.producer_id)
        if current is None:
            self.producers[info.producer_id] = info.updated
        else:
            current.merge(info.updated)
        for first_offset in info.started_txn_first_offsets:
            self.ongoing_txns[first_offset] = info.producer_id

    def last_stable_offset_after(self, txn: CompletedTxn) -> int:
        """LSO once ``txn`` completes: the next other open transaction, or just past the marker."""
        others = [off for off, pid in self.ongoing_txns.items() if pid != txn.producer_id]
        return min(others) if others else txn.last_offset + 1

    def complete_txn(self, txn: CompletedTxn) -> None:
        """Forget a completed transaction."""
        self.ongoing_txns.pop(txn.first_offset, None)

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction (None if none is open)."""
        return min(self.ongoing_txns) if self.ongoing_txns else None

    # -- expiration ----------------------------------------------------------------------------

    def _expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def remove_expired(self, now_ms: int) -> int:
        """Drop producers idle for ``producer.id.expiration.ms`` without an open transaction."""
        expired = [pid for pid, e in self.producers.items() if self._expired(e, now_ms)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # -- snapshots -----------------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> Path:
        """``{offset:020d}.snapshot`` in the partition directory."""
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files on disk, ascending."""
        offsets = []
        for path in self.directory.glob("*" + SNAPSHOT_SUFFIX):
            stem = path.name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)

    def take_snapshot(self) -> Path:
        """Write the state as of ``map_end_offset`` (atomically, CRC-protected)."""
        body = json.dumps({
            "version": _SNAPSHOT_VERSION,
            "offset": self.map_end_offset,
            "producers": [e.to_json() for e in self.producers.values()],
        }, separators=(",", ":")).encode()
        path = self.snapshot_path(self.map_end_offset)
        # No fsync: a snapshot lost or torn by a power failure fails its CRC and recovery falls
        # back to an older one plus a longer replay, so durability here would only cost time.
        atomic_write(path, b"%08x\n" % zlib.crc32(body) + body, sync=False)
        return path

    def _read_snapshot(self, offset: int) -> dict | None:
        path = self.snapshot_path(offset)
        try:
            raw = path.read_bytes()
            crc_line, body = raw.split(b"\n", 1)
            if int(crc_line, 16) != zlib.crc32(body):
                raise ValueError("CRC mismatch")
            data = json.loads(body)
            if data.get("version") != _SNAPSHOT_VERSION or data.get("offset") != offset:
                raise ValueError("unexpected version or offset")
            return data
        except (OSError, ValueError, KeyError) as exc:
            log.warning("ignoring unreadable producer snapshot %s: %s", path, exc)
            return None

    def load_snapshot(self, max_offset: int, now_ms: int | None = None) -> int | None:
        """Load the newest readable snapshot at or below ``max_offset``; its offset, or None.

        Unreadable snapshots are deleted. Without a snapshot the state starts empty at offset 0.
        Producers already expired at ``now_ms`` are skipped, as Kafka does.
        """
        self.producers.clear()
        self.ongoing_txns.clear()
        self.map_end_offset = 0
        for offset in reversed([o for o in self.snapshot_offsets() if o <= max_offset]):
            data = self._read_snapshot(offset)
            if data is None:
                remove_quietly(self.snapshot_path(offset))
                continue
            for raw in data["producers"]:
                entry = ProducerStateEntry.from_json(raw)
                if now_ms is not None and self._expired(entry, now_ms):
                    continue
                self.producers[entry.producer_id] = entry
                if entry.current_txn_first_offset is not None:
                    self.ongoing_txns[entry.current_txn_first_offset] = entry.producer_id
            self.map_end_offset = offset
            return offset
        return None

    def delete_snapshots(self, keep: set[int]) -> None:
        """Remove snapshot files whose offsets are not in ``keep``."""
        for offset in self.snapshot_offsets():
            if offset not in keep:
                remove_quietly(self.snapshot_path(offset))
