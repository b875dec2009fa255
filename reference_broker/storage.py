"""The handlers' view of the storage layer: a thin adapter over ``log.LogManager``.

It exists so handlers speak in protocol terms (a partition of a named topic, read_committed or
not, special ListOffsets answers) and so the one place that knows the log's method names is
here. It adds no state of its own beyond the clock and the data-arrival callback that wakes
long-polling fetches.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from reference_broker.config import BrokerConfig, ConfigError, quorum_configured
from reference_broker.log.cleaner import InThread
from reference_broker.log.config import LogConfig
from reference_broker.log.log_manager import LogManager, TopicCreation, TopicMetadata
from reference_broker.log.open_files import DEFAULT_CAPACITY, SEGMENT_FILES, raise_descriptor_limit
from reference_broker.log.partition_log import AppendResult
from reference_broker.log.producer_state import AppendOrigin, ProducerStateEntry
from sdk.protocol.errors import InvalidTopicError
from sdk.records import RecordBatch, RecordBatchBuilder, iter_batches

log = logging.getLogger("reference_broker.storage")

CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"
#: Topics the coordinators own: reported with is_internal in Metadata, written only by them.
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, TRANSACTION_STATE})


#: producer ids examined per housekeeping run (every few seconds) for expiry: the whole broker is
#: covered over successive runs, none holds the event loop for long
PRODUCER_EXPIRY_STEP = 20_000


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class FetchedData:
    """What one partition contributes to a FetchResponse."""

    records: bytes | memoryview
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[tuple[int, int]]


class Storage:
    """Topic metadata and partition logs of one broker."""

    def __init__(self, manager: LogManager, on_data: Callable[[Hashable], None] | None = None):
        self.manager = manager
        self.on_data = on_data

    @classmethod
    def open(cls, config: BrokerConfig, on_data: Callable[[Hashable], None] | None = None) -> Storage:
        """Open every log under the data dir (recovering them), with the broker's log defaults.

        First the soft descriptor limit is raised to the hard one and the number of segments
        that keep files open is capped (``log.open.segments.max``, see ``log.open_files``), so
        that many partitions or segments cannot use up the descriptors connections need."""
        soft, _ = raise_descriptor_limit()
        configured = config.get("log.open.segments.max")
        SEGMENT_FILES.configure(configured if configured is not None else min(DEFAULT_CAPACITY, soft // 8))
        try:
            defaults = config.log_config()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        try:
            manager = LogManager(
                config.data_dir, defaults, node_id=config.node_id, cluster_id=config.get("cluster.id"),
                replica_logs_on_demand=quorum_configured(config),  # cluster mode
            )
        except ValueError as exc:  # meta.properties of another node or cluster
            raise ConfigError(str(exc)) from None
        return cls(manager, on_data)

    @property
    def cluster_id(self) -> str:
        return self.manager.cluster_id

    @property
    def directory_id(self) -> uuid.UUID:
        return self.manager.directory_id

    def close(self) -> None:
        self.manager.close()

    def enforce_retention(self) -> None:
        self.manager.run_retention(now_ms())

    async def clean_logs(self, in_thread: InThread) -> str | None:
        """Compact the dirtiest compacted log that needs it (``cleanup.policy=compact``), its
        reading and writing in ``in_thread``; returns its name, None when none was cleaned."""
        return await self.manager.run_cleaner_in(in_thread, now_ms())

    def abort_cleaning(self, reason: str) -> None:
        """Abort the cleaning passes under way (the broker stops)."""
        self.manager.abort_cleaning(reason)

    def housekeeping(self) -> None:
        """fsync rolled segments (advancing recovery points) and expire idle producer ids."""
        self.manager.flush_logs(now_ms())
        self.manager.remove_expired_producers(now_ms(), budget=PRODUCER_EXPIRY_STEP)

    # -- topics --------------------------------------------------------------------------

    def topics(self) -> list[TopicMetadata]:
        return sorted(self.manager.topics().values(), key=lambda t: t.name)

    def topic(self, name: str) -> TopicMetadata | None:
        return self.manager.topic(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self.manager.topic_by_id(topic_id)

    def create_topic(self, name: str, partitions: int, overrides: Mapping[str, str | None]) -> TopicMetadata:
        return self.manager.create_topic(
            name, partitions, {k: v for k, v in overrides.items() if v is not None}
        )

    def begin_create_topic(
        self, name: str, partitions: int, overrides: Mapping[str, str | None]
    ) -> TopicCreation:
        """A creation to run a step at a time (see ``TopicCreation``); nothing visible before it
        commits."""
        return self.manager.begin_create_topic(
            name, partitions, {k: v for k, v in overrides.items() if v is not None}
        )

    def begin_add_partitions(self, name: str, total: int) -> TopicCreation:
        """Growing ``name`` to ``total`` partitions, a step at a time (see ``TopicCreation``)."""
        return self.manager.begin_create_partitions(name, total)

    def check_topic_config(self, overrides: Mapping[str, str | None]) -> LogConfig:
        """The config ``overrides`` would give a topic; ValueError (naming the key) if invalid."""
        return LogConfig.from_properties(overrides, self.manager.default_config)

    def delete_topic(self, name: str) -> None:
        meta = self.manager.delete_topic(name)
        if self.on_data is not None:
            for p in range(meta.num_partitions):
                self.on_data((name, p))

    def add_partitions(self, name: str, total: int) -> None:
        self.manager.create_partitions(name, total)

    def topic_config(self, name: str) -> LogConfig:
        return self.manager.topic_config(name)

    def topic_overrides(self, name: str) -> dict[str, str]:
        meta = self.manager.topic(name)
        return dict(meta.configs) if meta else {}

    def set_topic_overrides(self, name: str, overrides: Mapping[str, str]) -> None:
        """Replace all overrides (persisted by the log manager, applied to every partition)."""
        self.manager.update_topic_config(name, overrides, replace=True)

    # -- partitions ----------------------------------------------------------------------

    def append(
        self, topic: str, partition: int, records: bytes | memoryview, *, in_place: bool = False
    ) -> AppendResult:
        """Append to the partition's log; with ``in_place`` the caller gives ``records`` up and the
        log may assign offsets in them rather than in a copy (``PartitionLog.append``). This is
        the clients' path: internal topics are written only by their coordinators (Kafka answers
        a produce to them INVALID_TOPIC_EXCEPTION)."""
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"Cannot append to internal topic {topic}")
        result = self.manager.get_log(topic, partition).append(records, now_ms=now_ms(), in_place=in_place)
        if self.on_data is not None and not result.duplicate:
            self.on_data((topic, partition))
        return result

    def read(
        self, topic: str, partition: int, offset: int, max_bytes: int, *, min_one: bool, committed: bool
    ) -> FetchedData:
        plog = self.manager.get_log(topic, partition)
        result = plog.read(
            offset,
            max_bytes,
            max_offset=plog.last_stable_offset if committed else None,
            min_one_batch=min_one,
            with_aborted=committed,
        )
        return FetchedData(
            result.data,
            result.high_watermark,
            result.last_stable_offset,
            result.log_start_offset,
            result.aborted_transactions or [],
        )

    @property
    def log_dir(self) -> Path:
        """The one log directory every partition of this broker lives in."""
        return self.manager.data_dir

    def partition_size(self, topic: str, partition: int) -> int:
        """Bytes of the partition's segment files."""
        return self.manager.get_log(topic, partition).size_in_bytes

    def offsets(self, topic: str, partition: int) -> tuple[int, int, int]:
        """(log start offset, high watermark, last stable offset)."""
        plog = self.manager.get_log(topic, partition)
        return plog.log_start_offset, plog.high_watermark, plog.last_stable_offset

    def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or after ``timestamp``."""
        found = self.manager.get_log(topic, partition).offset_for_timestamp(max(timestamp, 0))
        return None if found is None else (found[1], found[0])

    def max_timestamp(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the record with the largest timestamp."""
        found = self.manager.get_log(topic, partition).max_timestamp_offset()
        return None if found is None else (found[1], found[0])

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        return self.manager.get_log(topic, partition).delete_records_before(offset, now_ms=now_ms())

    def active_producers(self, topic: str, partition: int) -> list[ProducerStateEntry]:
        """The producers the partition's producer state holds (DescribeProducers)."""
        return list(self.manager.get_log(topic, partition).producer_state.producers.values())

    # -- coordinators --------------------------------------------------------------------

    def ensure_internal_topic(
        self, name: str, partitions: int, overrides: Mapping[str, str]
    ) -> TopicMetadata:
        """The internal topic ``name``, created with ``partitions`` the first time. Like Kafka, an
        existing topic keeps its partition count (it decides where each key lives)."""
        assert is_internal(name), name
        meta = self.manager.topic(name)
        if meta is None:
            meta = self.manager.create_topic(name, partitions, dict(overrides))
            log.info("created internal topic %s with %d partitions", name, partitions)
        return meta

    def append_as_coordinator(
        self,
        topic: str,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> AppendResult:
        """Append ``records`` (key, value or None for a tombstone) as one batch on behalf of a
        coordinator: the coordinator's own state, not a client's produce. With a ``producer_id``
        the batch is transactional (TxnOffsetCommit): it stays pending until that producer's
        transaction marker."""
        if producer_id >= 0:
            builder = RecordBatchBuilder(
                producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=0, is_transactional=True
            )
        else:
            builder = RecordBatchBuilder()
        now = now_ms()
        for key, value in records:
            builder.append(now, key, value)
        result = self.manager.get_log(topic, partition).append(
            builder.build(), now_ms=now, origin=AppendOrigin.COORDINATOR
        )
        self._notify(topic, partition)
        return result

    def append_control_batch(
        self,
        topic: str,
        partition: int,
        control_type: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
    ) -> AppendResult:
        """A COMMIT/ABORT marker ending a producer's transaction on this partition (written by the
        transaction coordinator)."""
        result = self.manager.get_log(topic, partition).append_control(
            control_type, producer_id, producer_epoch, coordinator_epoch, now_ms=now_ms()
        )
        self._notify(topic, partition)
        return result

    def _notify(self, topic: str, partition: int) -> None:
        if self.on_data is not None:
            self.on_data((topic, partition))

    def read_batches(
        self, topic: str, partition: int, chunk_bytes: int = 1 << 20, *, to_log_end: bool = False
    ) -> Iterator[RecordBatch]:
        """Every batch of the partition from its log start to the high watermark (for loading a
        coordinator's state). ``to_log_end``: to the log end instead, as Kafka's coordinators load
        a partition they were just elected leader of (its high watermark may not yet cover what
        the previous leader committed; this log is the partition's truth from now on)."""
        plog = self.manager.get_log(topic, partition)
        offset = plog.log_start_offset
        while offset < (plog.log_end_offset if to_log_end else plog.high_watermark):
            if to_log_end:
                data = plog.read(offset, chunk_bytes, max_offset=plog.log_end_offset, min_one_batch=True).data
            else:
                data = self.read(topic, partition, offset, chunk_bytes, min_one=True, committed=False).records
            batches = list(iter_batches(bytes(data)))
            if not batches:
                break
            for batch in batches:
                if batch.next_offset > offset:
                    yield batch
            offset = max(offset, batches[-1].next_offset)
