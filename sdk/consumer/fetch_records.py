"""One partition's fetched bytes, turned into ConsumerRecords on demand.

A fetch response's record data for a partition is kept as it came (``PartitionRecords``) and
decoded one batch at a time as the application asks for records, so a prefetched megabyte costs
nothing until it is read and ``max_records`` bounds the work of one ``getmany``.

``decode_batch_records`` builds ``ConsumerRecord``s directly, without the intermediate
``sdk.records.Record`` objects, through the record reader's consumer output
(``sdk.records.reader``: C when built, else its Python twin): it is the consumer's hot path.
Batch framing, CRC and decompression stay with ``RecordBatch``.

Transactions (read_committed): the response's aborted-transactions list gives, per producer id,
the first offset of each aborted transaction. Walking batches in offset order, a producer becomes
"aborted" when a batch reaches that first offset, its transactional batches are dropped, and its
ABORT control marker ends that (Kafka's ``CompletedFetch`` does the same).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import Any

from sdk.client.cluster import TopicPartition
from sdk.consumer.errors import CorruptRecordInFetchError, RecordTooLargeForFetchError
from sdk.consumer.records import ConsumerRecord
from sdk.errors import SerializationError
from sdk.records import ControlType, RecordBatch, iter_batches, reader
from sdk.records.errors import CorruptRecordError

__all__ = ["PartitionRecords", "decode_batch_records"]


def decode_batch_records(
    batch: RecordBatch, topic: str, partition: int, min_offset: int, check_crc: bool
) -> list[ConsumerRecord]:
    """The records of ``batch`` with offsets >= ``min_offset``, as ConsumerRecords.

    Raises ``CorruptRecordError`` (from ``sdk.records``) for any defect, like iterating the batch;
    then none of the batch's records is returned.
    """
    data, start, end = batch.records_section(check_crc=check_crc)
    if batch.attributes & 0x08:
        ts_type, fixed_ts = 1, batch.max_timestamp
    else:
        ts_type, fixed_ts = 0, None
    records, error = reader.core.read_records(
        data, start, end, batch.record_count, batch.base_offset, batch.base_timestamp, fixed_ts,
        ConsumerRecord, (ts_type, min_offset, topic, partition),
    )
    if error is not None:
        raise error
    return records


def _end_offset(data: bytes) -> int | None:
    end = None
    try:
        for batch in iter_batches(data):
            end = batch.next_offset
    except CorruptRecordError:
        return None
    return end


class PartitionRecords:
    """The data of one partition from one fetch response, drained in order by ``take``.

    ``fetch_offset`` is the position the fetch was made at; the consumer discards the object if
    the position moved meanwhile (a seek). ``take`` advances the subscription's position itself
    (through ``set_position``) past every record returned and every batch skipped.
    """

    __slots__ = (
        "_aborted_pids",
        "_aborted_queue",
        "_batch_end",
        "_batches",
        "_check_crcs",
        "_key_deserializer",
        "_pending",
        "_pending_index",
        "_read_committed",
        "_saw_batch",
        "_size",
        "_value_deserializer",
        "end_offset",
        "error",
        "fetch_offset",
        "next_offset",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        fetch_offset: int,
        data: bytes,
        *,
        aborted: list[tuple[int, int]] | None,
        read_committed: bool,
        check_crcs: bool,
        key_deserializer: Callable[[bytes | None], Any] | None = None,
        value_deserializer: Callable[[bytes | None], Any] | None = None,
    ) -> None:
        self.tp = tp
        self.fetch_offset = fetch_offset
        #: Where the position goes once what was returned so far is consumed.
        self.next_offset = fetch_offset
        self._batch_end = fetch_offset
        self._size = len(data)
        #: Where the data's last whole batch ends (the next fetch may start there); None when
        #: there is no whole batch or the framing is broken.
        self.end_offset = _end_offset(data)
        self._batches: Iterator[RecordBatch] | None = iter_batches(data)
        self._pending: list[ConsumerRecord] = []
        self._pending_index = 0
        self._read_committed = read_committed
        self._check_crcs = check_crcs
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        # (first_offset, producer_id) min-heap of aborted transactions not reached yet.
        self._aborted_queue = [(first, pid) for pid, first in aborted or ()] if read_committed else []
        heapq.heapify(self._aborted_queue)
        self._aborted_pids: set[int] = set()
        self._saw_batch = False
        #: An error to raise once the records before it have been returned.
        self.error: BaseException | None = None

    @property
    def exhausted(self) -> bool:
        return self._batches is None and self._pending_index >= len(self._pending) and self.error is None

    def take(self, max_records: int) -> list[ConsumerRecord]:
        """Up to ``max_records`` records; an empty list when the data is used up.

        Raises the stored error (corrupt batch, batch too large) when no record precedes it.
        """
        out: list[ConsumerRecord] = []
        while len(out) < max_records:
            pending = self._pending
            index = self._pending_index
            if index < len(pending):
                stop = min(len(pending), index + max_records - len(out))
                chunk = pending[index:stop] if index or stop < len(pending) else pending
                if out:
                    out.extend(chunk)
                else:
                    out = chunk
                self._pending_index = stop
                self.next_offset = chunk[-1].offset + 1
                if stop >= len(pending):
                    self.next_offset = max(self.next_offset, self._batch_end)
                continue
            if self.error is not None:
                break
            if not self._next_batch():
                break
        if not out and self.error is not None:
            error, self.error = self.error, None
            raise error
        return out

    def next_record(self) -> ConsumerRecord | None:
        """The next record if one is decoded and waiting (the common case), else None: then
        ``take`` does the rest."""
        pending = self._pending
        index = self._pending_index
        if index >= len(pending):
            return None
        record = pending[index]
        index += 1
        self._pending_index = index
        self.next_offset = record.offset + 1
        if index >= len(pending):
            self.next_offset = max(self.next_offset, self._batch_end)
        return record

    def _next_batch(self) -> bool:
        """Decode the next batch that has records to return into ``_pending``; False at the end."""
        batches = self._batches
        if batches is None:
            return False
        tp = self.tp
        try:
            for batch in batches:
                self._saw_batch = True
                next_offset = batch.next_offset
                # Every batch of the response counts for the aborted-transaction bookkeeping,
                # those before the position too: an ABORT marker there ends its producer's
                # aborted range, which must not then swallow that producer's later batches.
                if self._read_committed and self._skip_for_transaction(batch):
                    self.next_offset = max(self.next_offset, next_offset)
                    continue
                if next_offset <= self.next_offset:
                    continue  # wholly before the position (the broker returns whole batches)
                if batch.is_control:
                    self.next_offset = next_offset
                    continue
                records = decode_batch_records(
                    batch, tp.topic, tp.partition, self.next_offset, self._check_crcs
                )
                if self._key_deserializer is not None or self._value_deserializer is not None:
                    records = self._deserialize(records)
                if self.error is not None:  # a deserializer failed: stop at that record
                    next_offset = self.error.offset  # type: ignore[attr-defined]  # set with the error below
                if not records:
                    self.next_offset = next_offset
                    if self.error is not None:
                        return False
                    continue
                self._pending = records
                self._pending_index = 0
                self._batch_end = next_offset
                return True
        except CorruptRecordError as exc:
            self._batches = None
            self.error = CorruptRecordInFetchError(
                f"corrupt record batch in {tp.topic}-{tp.partition} at offset {self.next_offset}: {exc}",
                tp,
                self.next_offset,
            )
            self.error.__cause__ = exc
            return False
        self._batches = None
        if not self._saw_batch and self._size > 0:
            self.error = RecordTooLargeForFetchError(
                f"the batch at offset {self.next_offset} of {tp.topic}-{tp.partition} is larger than "
                f"the {self._size} bytes the fetch returned; raise max_partition_fetch_bytes",
                tp,
                self.next_offset,
            )
        return False

    def _skip_for_transaction(self, batch: RecordBatch) -> bool:
        """read_committed: True if ``batch`` belongs to an aborted transaction (or ends one)."""
        queue = self._aborted_queue
        last_offset = batch.last_offset
        while queue and queue[0][0] <= last_offset:
            self._aborted_pids.add(heapq.heappop(queue)[1])
        pid = batch.producer_id
        if batch.is_control:
            if pid in self._aborted_pids:
                try:
                    marker = batch.control_record()
                except CorruptRecordError:
                    return True
                if marker.type == ControlType.ABORT:
                    self._aborted_pids.discard(pid)
            return True
        return batch.is_transactional and pid in self._aborted_pids

    def _deserialize(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """Apply the deserializers (to None too, as aiokafka does). If one raises, the records
        before the failing one are returned and ``SerializationError`` is raised next, with the
        position left at the failing record."""
        key_fn = self._key_deserializer
        value_fn = self._value_deserializer
        for index, record in enumerate(records):
            try:
                if key_fn is not None:
                    record.key = key_fn(record.key)
                if value_fn is not None:
                    record.value = value_fn(record.value)
            except Exception as exc:
                tp = self.tp
                self._batches = None
                self.error = SerializationError(
                    f"deserializing the record at offset {record.offset} of {tp.topic}-{tp.partition} "
                    f"failed: {exc!r}"
                )
                self.error.__cause__ = exc
                self.error.offset = record.offset  # type: ignore[attr-defined]  # the failing record, read above
                return records[:index]
        return records
