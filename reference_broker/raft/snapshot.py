"""KRaft snapshot files, as Kafka's ``Snapshots``/``RecordsSnapshotWriter`` lay them out.

A snapshot of the metadata log up to (excluding) ``end_offset`` lives next to the log segments as
``<20-digit end offset>-<10-digit epoch>.checkpoint``; one being written or downloaded is
``....checkpoint.part`` until it is complete, then renamed (so a ``.checkpoint`` file is always
whole). Its content is record batches like the log's: a control batch with a
SnapshotHeaderRecord first, the data batches (metadata records in MetadataRecordSerde framing),
and a control batch with a SnapshotFooterRecord last; offsets count from 0 within the file and
every batch carries the snapshot's epoch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reference_broker.raft.serde import batch_records, build_control_record_batch, build_data_batch
from sdk.protocol.messages import Message, SnapshotFooterRecord, SnapshotHeaderRecord
from sdk.records.batch import iter_batches

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
DELETED_SUFFIX = ".checkpoint.deleted"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint(\.part|\.deleted)?$")
#: records per data batch of a snapshot (Kafka's writer batches by size; any split is valid)
RECORDS_PER_BATCH = 1000


class SnapshotError(ValueError):
    """A snapshot file that is not a whole KRaft snapshot (no header, no footer, bad batches)."""


@dataclass(frozen=True, order=True)
class SnapshotId:
    """Kafka's ``OffsetAndEpoch`` of a snapshot: it holds offsets ``[0, end_offset)``."""

    end_offset: int
    epoch: int

    @property
    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SUFFIX}"


def snapshot_path(directory: Path, snapshot_id: SnapshotId, suffix: str = SUFFIX) -> Path:
    return directory / (snapshot_id.file_name[: -len(SUFFIX)] + suffix)


def parse_snapshot_name(name: str) -> tuple[SnapshotId, str] | None:
    """``(id, suffix)`` of a snapshot file name (suffix ``""``, ``.part`` or ``.deleted``)."""
    match = _NAME.match(name)
    if match is None:
        return None
    return SnapshotId(int(match.group(1)), int(match.group(2))), match.group(3) or ""


def scan_snapshots(directory: Path) -> list[SnapshotId]:
    """The complete snapshots in ``directory``, oldest first; leftovers of an interrupted write,
    download or deletion (``.part``, ``.deleted``) are removed, as Kafka does at start."""
    found: list[SnapshotId] = []
    if not directory.is_dir():
        return found
    for path in directory.iterdir():
        parsed = parse_snapshot_name(path.name)
        if parsed is None:
            continue
        snapshot_id, suffix = parsed
        if suffix:
            path.unlink(missing_ok=True)
        else:
            found.append(snapshot_id)
    return sorted(found)


def _write_durably(path: Path, data: bytes | bytearray, final: Path) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path, final)
    fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SnapshotWriter:
    """Collects a snapshot's records; :meth:`freeze` writes the file (header, data, footer).

    Nothing is visible until ``freeze``; a writer dropped without it leaves no file.
    """

    def __init__(self, directory: Path, snapshot_id: SnapshotId, last_contained_log_timestamp: int,
                 on_freeze: Callable[[SnapshotId], None] | None = None) -> None:
        self.directory = Path(directory)
        self.snapshot_id = snapshot_id
        self.last_contained_log_timestamp = last_contained_log_timestamp
        self._records: list[Message] = []
        #: KRaft control records written right after the header (KRaftVersionRecord and
        #: VotersRecord of a dynamic quorum, as Kafka's ``RecordsSnapshotWriter``)
        self.control: list[Message] = []
        self._on_freeze = on_freeze
        self._frozen = False

    @property
    def last_contained_offset(self) -> int:
        return self.snapshot_id.end_offset - 1

    @property
    def epoch(self) -> int:
        return self.snapshot_id.epoch

    def append(self, records: Sequence[Message]) -> None:
        if self._frozen:
            raise SnapshotError(f"snapshot {self.snapshot_id.file_name} is already written")
        self._records.extend(records)

    def encode(self) -> bytes:
        """The file's bytes."""
        epoch, ts = self.snapshot_id.epoch, self.last_contained_log_timestamp
        out = bytearray(build_control_record_batch(
            SnapshotHeaderRecord(version=0, last_contained_log_timestamp=ts),
            base_offset=0, epoch=epoch, timestamp_ms=ts))
        offset = 1
        for message in self.control:
            out += build_control_record_batch(message, base_offset=offset, epoch=epoch,
                                              timestamp_ms=ts)
            offset += 1
        for start in range(0, len(self._records), RECORDS_PER_BATCH):
            chunk = self._records[start: start + RECORDS_PER_BATCH]
            out += build_data_batch(chunk, base_offset=offset, epoch=epoch, timestamp_ms=ts)
            offset += len(chunk)
        out += build_control_record_batch(SnapshotFooterRecord(version=0), base_offset=offset,
                                          epoch=epoch, timestamp_ms=ts)
        return bytes(out)

    def freeze(self) -> Path:
        """Write the snapshot durably under its final name; returns its path."""
        if self._frozen:
            raise SnapshotError(f"snapshot {self.snapshot_id.file_name} is already written")
        self.directory.mkdir(parents=True, exist_ok=True)
        final = snapshot_path(self.directory, self.snapshot_id)
        _write_durably(snapshot_path(self.directory, self.snapshot_id, PARTIAL_SUFFIX),
                       self.encode(), final)
        self._frozen = True
        if self._on_freeze is not None:
            self._on_freeze(self.snapshot_id)
        return final


@dataclass(frozen=True)
class SnapshotReader:
    """A whole snapshot read back: what ``RaftListener.handle_load_snapshot`` receives."""

    snapshot_id: SnapshotId
    last_contained_log_timestamp: int
    records: list[Message]
    #: the control records between header and footer (KRaftVersionRecord, VotersRecord)
    control: list[Message] = field(default_factory=list)

    @property
    def last_contained_offset(self) -> int:
        return self.snapshot_id.end_offset - 1

    @property
    def epoch(self) -> int:
        return self.snapshot_id.epoch

    @classmethod
    def parse(cls, snapshot_id: SnapshotId, data: bytes) -> SnapshotReader:
        """Decode a snapshot's bytes; :class:`SnapshotError` unless header ... footer, whole."""
        try:
            batches = list(iter_batches(data))
        except Exception as exc:
            raise SnapshotError(f"snapshot {snapshot_id.file_name}: {exc}") from exc
        if sum(b.size_in_bytes for b in batches) != len(data):
            raise SnapshotError(f"snapshot {snapshot_id.file_name} ends inside a batch")
        if len(batches) < 2 or not batches[0].is_control or not batches[-1].is_control:
            raise SnapshotError(f"snapshot {snapshot_id.file_name} lacks its header or footer")
        header = batch_records(batches[0])
        footer = batch_records(batches[-1])
        if len(header) != 1 or not isinstance(header[0], SnapshotHeaderRecord):
            raise SnapshotError(f"snapshot {snapshot_id.file_name} does not start with a header")
        if len(footer) != 1 or not isinstance(footer[0], SnapshotFooterRecord):
            raise SnapshotError(f"snapshot {snapshot_id.file_name} does not end with a footer")
        records: list[Message] = []
        control: list[Message] = []
        for batch in batches[1:-1]:
            (control if batch.is_control else records).extend(batch_records(batch))
        return cls(snapshot_id, header[0].last_contained_log_timestamp, records, control)

    @classmethod
    def open(cls, directory: Path, snapshot_id: SnapshotId) -> SnapshotReader:
        return cls.parse(snapshot_id, snapshot_path(directory, snapshot_id).read_bytes())


class SnapshotDownload:
    """A snapshot arriving from the leader in chunks (FetchSnapshot): appended to its ``.part``
    file at the position the leader answered for; :meth:`freeze` checks it is whole and renames
    it."""

    def __init__(self, directory: Path, snapshot_id: SnapshotId) -> None:
        self.directory = Path(directory)
        self.snapshot_id = snapshot_id
        self.path = snapshot_path(self.directory, snapshot_id, PARTIAL_SUFFIX)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path.write_bytes(b"")
        self.size = 0

    def append(self, position: int, data: bytes | memoryview) -> None:
        if position != self.size:
            raise SnapshotError(f"snapshot chunk at {position}, expected {self.size}")
        with open(self.path, "ab") as f:
            f.write(data)
        self.size += len(data)

    def freeze(self) -> SnapshotReader:
        data = self.path.read_bytes()
        reader = SnapshotReader.parse(self.snapshot_id, data)
        _write_durably(self.path, data, snapshot_path(self.directory, self.snapshot_id))
        return reader

    def abandon(self) -> None:
        self.path.unlink(missing_ok=True)
