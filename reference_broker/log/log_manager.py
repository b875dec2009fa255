"""All partition logs of one data directory, and the topic metadata that goes with them.

Layout of ``data_dir``::

    meta.properties                 cluster.id, node.id, directory.id, version=1 (Kafka KRaft form)
    .topics/<topic>.json            topic id, partition count, config overrides (the commit point)
    <topic>-<partition>/            one PartitionLog each, plus partition.metadata (topic id)

Every metadata file is replaced atomically (temp file, fsync, rename, fsync dir). Topic creation
writes the partition directories first and the topic file last, and a creation that fails removes
what it made before answering; deletion removes the topic file first, then renames each partition
directory to ``<topic>-<partition>.<uuid>-delete`` and removes it after the broker's
``log.segment.delete.delay.ms`` (segments removed from a log likewise wait, renamed ``.deleted``:
see ``_deletion``). So after a crash: a partition
directory whose topic file is missing, or whose ``partition.metadata`` names another topic id, is
*stray* and is renamed ``<topic>-<partition>.<uuid>-stray`` (never silently deleted, never
served); leftover ``-delete`` directories are removed after the delay; a missing partition
directory of a known topic is recreated empty (with a warning). A stray directory that cannot
be renamed is logged and left where it is, unserved: nothing found on disk stops a start.

Names derived from a topic name fit a file name's 255 bytes for every legal topic name (up to 249
characters): the renamed ``-delete``/``-stray`` directories cut the topic part short as Kafka's
``LocalLog.logDirNameWithSuffixCappedLength`` does (the loader never parses a topic out of them);
a topic whose ``<topic>.json`` plus the temp suffix would not fit has its file named
``<first characters>~<digest>.json`` (``~`` is not legal in a topic name, so it never meets
another topic's file; the loader reads the name from the content); and a partition directory
``<topic>-<partition>`` that would not fit is refused at creation (InvalidPartitionsError).

Errors raised (from ``sdk.protocol.errors``): ``InvalidTopicError`` (bad or colliding name),
``TopicAlreadyExistsError``, ``InvalidPartitionsError``, ``InvalidConfigError`` (message names
the key), ``UnknownTopicOrPartitionError``.

The broker calls :meth:`LogManager.run_periodic` (or its three parts) from a timer: Kafka runs
retention every ``log.retention.check.interval.ms`` (5 min), the flusher every
``log.flush.scheduler.interval.ms`` and producer-id expiration every 10 min; once a few seconds
is fine here.
"""

from __future__ import annotations

import base64
import collections
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from reference_broker.log._deletion import DelayedDeletions
from reference_broker.log._files import TMP_SUFFIX, atomic_write, fsync_dir, os_error_text, remove_quietly
from reference_broker.log.cleaner import (
    CleanerError,
    CleaningAborted,
    CleaningPass,
    InThread,
    cleanable,
    read_checkpoint,
    write_checkpoint,
)
from reference_broker.log.config import INTERNAL_SEGMENT_BYTES, SEGMENT_BYTES_MIN, LogConfig
from reference_broker.log.partition_log import PartitionLog
from sdk.protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

__all__ = ["LogManager", "TopicMetadata", "topic_id_from_string", "topic_id_to_string"]

log = logging.getLogger("reference_broker.log")

TOPICS_DIR = ".topics"
META_PROPERTIES = "meta.properties"
PARTITION_METADATA = "partition.metadata"
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249
#: The longest file or directory name (bytes) the file systems the broker runs on accept.
MAX_FILE_NAME_BYTES = 255
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
#: The cluster's metadata log (its raft client's, in the data dir by default): never a topic's.
METADATA_PARTITION_DIR = "__cluster_metadata-0"
#: Kafka's suffix for a partition moving between log directories; never made here, left alone.
FUTURE_DIR_SUFFIX = "-future"
_TOPIC_FILE_SUFFIX = ".json"
#: Not legal in a topic name: a shortened topic file name never equals a whole one.
_SHORTENED_MARK = "~"
_DIGEST_CHARS = 16


def topic_id_to_string(topic_id: uuid.UUID) -> str:
    """Kafka's textual topic/cluster id: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def topic_id_from_string(text: str) -> uuid.UUID:
    """Inverse of :func:`topic_id_to_string` (also accepts the canonical UUID form)."""
    text = text.strip()
    if len(text) == 22:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    return uuid.UUID(text)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class TopicMetadata:
    """A topic as stored: id, partition count and its config overrides (Kafka names)."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        """The ``.topics/<name>.json`` content."""
        return json.dumps({
            "version": 1, "name": self.name, "topic_id": topic_id_to_string(self.topic_id),
            "partitions": self.num_partitions, "configs": dict(self.configs),
        }, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> TopicMetadata:
        """Parse :meth:`to_json` output."""
        data = json.loads(raw)
        return cls(str(data["name"]), topic_id_from_string(data["topic_id"]),
                   int(data["partitions"]), {str(k): str(v) for k, v in data["configs"].items()})


def _upgrade_segment_bytes(meta: TopicMetadata, path: Path) -> TopicMetadata:
    """A topic stored with a ``segment.bytes`` below Kafka 4's floor keeps its segment size as
    ``internal.segment.bytes`` (rewritten in its file), so its configs stay valid and it loads."""
    raw = meta.configs.get("segment.bytes")
    try:
        small = raw is not None and int(raw) < SEGMENT_BYTES_MIN
    except ValueError:
        return meta
    if not small:
        return meta
    configs = {k: v for k, v in meta.configs.items() if k != "segment.bytes"}
    configs.setdefault(INTERNAL_SEGMENT_BYTES, str(raw))
    upgraded = TopicMetadata(meta.name, meta.topic_id, meta.num_partitions, configs)
    log.warning("topic %s: segment.bytes=%s is below the minimum %d; kept as %s",
                meta.name, raw, SEGMENT_BYTES_MIN, INTERNAL_SEGMENT_BYTES)
    atomic_write(path, upgraded.to_json())
    return upgraded


def renamed_partition_dir_name(topic: str, partition: int, suffix: str) -> str:
    """``<topic>-<partition>.<uuid>{suffix}`` for a partition directory being deleted or put
    aside, the topic part cut so the whole fits ``MAX_FILE_NAME_BYTES`` (topic names are ASCII)."""
    tail = f"-{partition}.{uuid.uuid4().hex}{suffix}"
    return topic[: max(0, MAX_FILE_NAME_BYTES - len(tail))] + tail


def topic_file_name(topic: str) -> str:
    """The name of ``topic``'s metadata file in ``.topics``: ``<topic>.json`` where it and its
    temp file fit ``MAX_FILE_NAME_BYTES``, otherwise a prefix of the name, ``~`` and a digest."""
    whole = topic + _TOPIC_FILE_SUFFIX
    if len(whole) + len(TMP_SUFFIX) <= MAX_FILE_NAME_BYTES:
        return whole
    digest = hashlib.sha256(topic.encode()).hexdigest()[:_DIGEST_CHARS]
    keep = MAX_FILE_NAME_BYTES - len(TMP_SUFFIX) - len(_TOPIC_FILE_SUFFIX) - _DIGEST_CHARS - 1
    return f"{topic[:keep]}{_SHORTENED_MARK}{digest}{_TOPIC_FILE_SUFFIX}"


def check_partition_dir_fits(topic: str, num_partitions: int) -> None:
    """InvalidPartitionsError unless every ``<topic>-<partition>`` directory name fits."""
    longest = f"{topic}-{num_partitions - 1}"
    if len(longest) > MAX_FILE_NAME_BYTES:
        raise InvalidPartitionsError(
            f"topic {topic!r} cannot have {num_partitions} partitions: the directory name"
            f" {longest[:20]}...-{num_partitions - 1} would be longer than {MAX_FILE_NAME_BYTES} bytes")


def validate_topic_name(name: str) -> None:
    """Kafka's rules: 1-249 chars of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    if not name or name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: only ASCII alphanumerics, '.', '_' and '-' are allowed"
        )


class LogManager:
    """Owns every :class:`PartitionLog` under ``data_dir`` and the topic metadata.

    Construction discovers and opens (recovering if needed) everything on disk.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        default_config: LogConfig | None = None,
        *,
        node_id: int = 0,
        cluster_id: str | None = None,
        now_ms: int | None = None,
        replica_logs_on_demand: bool = False,
    ):
        self.data_dir = Path(data_dir)
        #: Cluster mode: a topic's partitions get a log only when asked for one
        #: (:meth:`ensure_partition_log`, this node becoming a replica), never at topic creation
        #: nor for a directory missing at start; the metadata decides what is stray.
        self.replica_logs_on_demand = replica_logs_on_demand
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / TOPICS_DIR).mkdir(exist_ok=True)
        self.default_config = default_config or LogConfig()
        self.node_id = node_id
        self.cluster_id = self._init_meta_properties(node_id, cluster_id)
        self._topics: dict[str, TopicMetadata] = {}
        self._configs: dict[str, LogConfig] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._closed = False
        #: logs the cleaner failed to read (damaged data): skipped until the next start, as Kafka
        #: marks a partition uncleanable
        self._uncleanable: set[str] = set()
        #: cleaning passes under way, by log (Kafka's LogCleanerManager "in progress" state)
        self._cleaning: dict[int, CleaningPass] = {}
        #: topics being created or grown a step at a time (``TopicCreation``)
        self._creating: set[str] = set()
        #: logs whose producer ids the current round of bounded expiry has not looked at yet
        self._expiry_queue: collections.deque[tuple[str, int]] = collections.deque()
        #: removed segments' and partitions' files waiting out their delete delay
        self.deletions = DelayedDeletions()
        self._load(_now_ms() if now_ms is None else now_ms)

    # -- meta.properties -------------------------------------------------------------------

    def _init_meta_properties(self, node_id: int, cluster_id: str | None) -> str:
        path = self.data_dir / META_PROPERTIES
        if path.exists():
            props = _read_properties(path)
            stored_node = int(props.get("node.id", "-1"))
            stored_cluster = props.get("cluster.id", "")
            if stored_node != node_id:
                raise ValueError(f"{path}: stored node.id {stored_node} does not match {node_id}")
            if cluster_id is not None and stored_cluster != cluster_id:
                raise ValueError(
                    f"{path}: stored cluster.id {stored_cluster} does not match {cluster_id}")
            return stored_cluster
        cluster_id = cluster_id or topic_id_to_string(uuid.uuid4())
        body = (
            "#\n#Written by reference_broker\n"
            f"cluster.id={cluster_id}\ndirectory.id={topic_id_to_string(uuid.uuid4())}\n"
            f"node.id={node_id}\nversion=1\n"
        )
        atomic_write(path, body.encode())
        return cluster_id

    @property
    def directory_id(self) -> uuid.UUID:
        """This directory's ``directory.id`` (meta.properties): a raft replica's directory id
        (KIP-853); the zero uuid when the file has none."""
        props = _read_properties(self.data_dir / META_PROPERTIES)
        text = props.get("directory.id", "")
        return topic_id_from_string(text) if text else uuid.UUID(int=0)

    # -- discovery -------------------------------------------------------------------------

    def _load(self, now_ms: int) -> None:
        meta: TopicMetadata | None
        for path in (self.data_dir / TOPICS_DIR).glob("*" + TMP_SUFFIX):
            if path.is_file():  # a topic file write interrupted by a crash
                _unlink_logged(path)
        for path in sorted((self.data_dir / TOPICS_DIR).glob("*.json")):
            try:
                meta = _upgrade_segment_bytes(TopicMetadata.from_json(path.read_bytes()), path)
                config = LogConfig.from_properties(meta.configs, self.default_config)
            except (ValueError, KeyError, TypeError) as exc:
                log.error("ignoring unreadable topic metadata %s: %s", path, exc)
                continue
            self._topics[meta.name] = meta
            self._configs[meta.name] = config
        for path in sorted(self.data_dir.iterdir()):
            if not path.is_dir() or path.name.startswith("."):
                continue
            if path.name.endswith(DELETE_DIR_SUFFIX):
                self._remove_dir_later(path)
                continue
            if path.name.endswith((STRAY_DIR_SUFFIX, FUTURE_DIR_SUFFIX)):
                log.info("leaving %s alone: a partition directory put aside, not served", path.name)
                continue
            match = _PARTITION_DIR.match(path.name)
            if match is None or path.name == METADATA_PARTITION_DIR:
                continue
            topic, partition = match.group(1), int(match.group(2))
            meta = self._topics.get(topic)
            stored_id = _read_partition_topic_id(path)
            if meta is None or partition >= meta.num_partitions or (
                stored_id is not None and stored_id != meta.topic_id
            ):
                self._quarantine(path, topic, partition)
                continue
            self._logs[(topic, partition)] = self._open_partition(meta, partition, now_ms)
        for meta in self._topics.values() if not self.replica_logs_on_demand else ():
            for partition in range(meta.num_partitions):
                if (meta.name, partition) not in self._logs:
                    log.warning("partition directory %s-%d is missing; creating it empty",
                                meta.name, partition)
                    self._logs[(meta.name, partition)] = self._open_partition(meta, partition, now_ms)

    def _quarantine(self, path: Path, topic: str, partition: int) -> bool:
        """Rename a partition directory no topic owns to ``...-stray``; False (logged) if the
        rename failed, in which case the directory stays where it is and is not served."""
        target = path.with_name(renamed_partition_dir_name(topic, partition, STRAY_DIR_SUFFIX))
        try:
            path.rename(target)
            fsync_dir(self.data_dir)
        except OSError as exc:
            log.error("partition directory %s belongs to no known topic (or another topic id)"
                      " and cannot be moved aside (%s); it is left in place, not served", path, exc)
            return False
        log.warning("partition directory %s belongs to no known topic (or another topic id);"
                    " moved to %s", path, target.name)
        return True

    def _clear_leftovers(self, topic: str, partitions: range) -> None:
        """Move aside directories a new partition would otherwise adopt; KafkaStorageError if one
        cannot be moved (the partition is then not created)."""
        for partition in partitions:
            leftover = self.data_dir / f"{topic}-{partition}"
            if leftover.exists() and not self._quarantine(leftover, topic, partition):
                raise KafkaStorageError(f"cannot move aside the old directory {leftover.name}")

    def _remove_partition_dir(self, topic: str, partition: int, plog: PartitionLog | None, *,
                              at_once: bool = False) -> None:
        """Remove one partition directory (and close its log, when open): renamed to
        ``...-delete`` first, so a crash halfway leaves nothing that looks live, and removed after
        ``log.segment.delete.delay.ms`` (``at_once``: now, for partitions no client ever saw,
        those of a creation being undone). Never raises:
        what cannot be removed is logged (a ``-delete`` directory is removed at the next start,
        anything else is put aside as stray)."""
        directory = self.data_dir / f"{topic}-{partition}"
        doomed = directory.with_name(renamed_partition_dir_name(topic, partition, DELETE_DIR_SUFFIX))
        if plog is not None and (cleaning := self._cleaning.get(id(plog))) is not None:
            # From here the pass creates no file, so the removal below takes all of its output.
            cleaning.abort(f"{plog.name} is being deleted", directory_gone=True)
        renamed = False
        try:
            directory.rename(doomed)
            renamed = True
            fsync_dir(self.data_dir)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if not renamed:
                log.error("cannot rename %s for deletion (%s); removing it in place", directory.name, exc)
                shutil.rmtree(directory, ignore_errors=True)
        if plog is not None:
            try:
                plog.delete()  # closes its files; its directory has already left its name
            except OSError as exc:
                log.error("closing the deleted log %s failed: %s", plog.name, exc)
        if renamed and at_once:
            shutil.rmtree(doomed, ignore_errors=True)
        elif renamed:
            self._remove_dir_later(doomed)

    def _remove_dir_later(self, doomed: Path) -> None:
        """Remove a ``-delete`` directory after the broker's ``log.segment.delete.delay.ms``
        (Kafka's LogManager uses the broker default, not the topic's, for whole logs)."""
        delay_ms = self.default_config.file_delete_delay_ms
        log.info("%s goes in %d ms", doomed.name, delay_ms)
        self.deletions.schedule(delay_ms, doomed.name,
                                functools.partial(shutil.rmtree, doomed, ignore_errors=True))

    def _open_partition(self, meta: TopicMetadata, partition: int, now_ms: int) -> PartitionLog:
        directory = self.data_dir / f"{meta.name}-{partition}"
        fresh = not directory.exists()  # no fsync for a new partition's files (see _loader)
        plog = PartitionLog.open(directory, self._configs[meta.name], now_ms=now_ms)
        plog.deletions = self.deletions
        if _read_partition_topic_id(directory) != meta.topic_id:
            body = f"version: 0\ntopic_id: {topic_id_to_string(meta.topic_id)}\n"
            atomic_write(directory / PARTITION_METADATA, body.encode(), sync=not fresh)
        return plog

    # -- topics ----------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        configs: Mapping[str, str] | None = None,
        *,
        topic_id: uuid.UUID | None = None,
        validate_only: bool = False,
        now_ms: int | None = None,
    ) -> TopicMetadata:
        """Create a topic with ``num_partitions`` empty partitions and config overrides."""
        creation = self.begin_create_topic(
            name, num_partitions, configs, topic_id=topic_id, validate_only=validate_only, now_ms=now_ms)
        if validate_only:
            return creation.meta
        return creation.run()

    def begin_create_topic(
        self,
        name: str,
        num_partitions: int,
        configs: Mapping[str, str] | None = None,
        *,
        topic_id: uuid.UUID | None = None,
        validate_only: bool = False,
        now_ms: int | None = None,
    ) -> TopicCreation:
        """Check a new topic and reserve its name; the returned creation opens its partitions a
        step at a time (:meth:`TopicCreation.step`) so a caller on the event loop can yield
        between steps. Nothing is visible until :meth:`TopicCreation.commit`."""
        self._check_open()
        validate_topic_name(name)
        if name in self._topics or name in self._creating:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        canonical = name.replace(".", "_")
        for other in [*self._topics, *self._creating]:
            if other.replace(".", "_") == canonical:
                raise InvalidTopicError(f"topic {name!r} collides with existing topic {other!r}")
        if num_partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, not {num_partitions}")
        check_partition_dir_fits(name, num_partitions)
        overrides = {k: str(v) for k, v in (configs or {}).items() if v is not None}
        config = self._parse_config(overrides)
        meta = TopicMetadata(name, topic_id or uuid.uuid4(), num_partitions, overrides)
        creation = TopicCreation(self, meta, None, config, _now_ms() if now_ms is None else now_ms)
        if not validate_only:
            self._clear_leftovers(name, range(num_partitions))  # never adopt data the topic did not write
            self._creating.add(name)
        return creation

    def delete_topic(self, name: str) -> TopicMetadata:
        """Delete a topic and all its data; returns what was deleted."""
        self._check_open()
        meta = self._require_topic(name)
        remove_quietly(self._topic_path(name))
        self._sync_topics_dir()
        del self._topics[name]
        del self._configs[name]
        for partition in range(meta.num_partitions):
            self._remove_partition_dir(name, partition, self._logs.pop((name, partition), None))
        return meta

    def delete_partition_log(self, topic: str, partition: int) -> bool:
        """Drop one partition's log from this broker while its topic lives on (a replica moved to
        other brokers): its directory is renamed ``-delete`` now and removed after
        ``log.segment.delete.delay.ms``, as a deleted topic's. False if it was not here."""
        self._check_open()
        plog = self._logs.pop((topic, partition), None)
        if plog is None:
            return False
        self._remove_partition_dir(topic, partition, plog)
        return True

    def quarantine_partition_log(self, topic: str, partition: int) -> bool:
        """Close one partition's log and move its directory aside as ``-stray`` (a replica the
        metadata no longer assigns here, found at start): never served, never deleted. False if
        it was not here or could not be moved (logged; it is no longer served either way)."""
        self._check_open()
        plog = self._logs.pop((topic, partition), None)
        if plog is None:
            return False
        if (cleaning := self._cleaning.get(id(plog))) is not None:
            cleaning.abort(f"{plog.name} is stray")
        try:
            plog.close()
        except OSError as exc:
            log.error("closing the stray log %s failed: %s", plog.name, exc)
        return self._quarantine(self.data_dir / f"{topic}-{partition}", topic, partition)

    def ensure_partition_log(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log, created empty if :meth:`delete_partition_log` dropped it (a
        replica assigned here again starts from nothing and fetches from its leader)."""
        self._check_open()
        plog = self._logs.get((topic, partition))
        if plog is not None:
            return plog
        meta = self._require_topic(topic)
        if not 0 <= partition < meta.num_partitions:
            raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{partition}")
        self._clear_leftovers(topic, range(partition, partition + 1))
        plog = self._logs[(topic, partition)] = self._open_partition(meta, partition, _now_ms())
        return plog

    def _undo_partitions(self, name: str, partitions: range, opened: list[PartitionLog]) -> None:
        """Remove the directories a failed creation made (``opened`` are the logs it opened, in
        the order of ``partitions``; the rest may have a directory without an open log)."""
        for i, partition in enumerate(partitions):
            self._remove_partition_dir(name, partition, opened[i] if i < len(opened) else None,
                                       at_once=True)

    def _sync_topics_dir(self) -> None:
        try:
            fsync_dir(self.data_dir / TOPICS_DIR)
        except OSError as exc:
            log.error("fsync of %s failed: %s", self.data_dir / TOPICS_DIR, exc)

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False,
                          now_ms: int | None = None) -> TopicMetadata:
        """Grow a topic to ``total`` partitions (Kafka never shrinks)."""
        creation = self.begin_create_partitions(name, total, validate_only=validate_only, now_ms=now_ms)
        if validate_only:
            return creation.meta
        return creation.run()

    def begin_create_partitions(self, name: str, total: int, *, validate_only: bool = False,
                                now_ms: int | None = None) -> TopicCreation:
        """Check growing a topic to ``total`` partitions; the returned creation adds them a step
        at a time, as :meth:`begin_create_topic`'s does. Nothing is visible until it commits."""
        self._check_open()
        meta = self._require_topic(name)
        if name in self._creating:
            raise InvalidPartitionsError(f"topic {name!r} is already getting new partitions")
        if total <= meta.num_partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {meta.num_partitions} partitions; {total} is not an increase")
        check_partition_dir_fits(name, total)
        updated = TopicMetadata(name, meta.topic_id, total, meta.configs)
        creation = TopicCreation(self, updated, meta, self._configs[name],
                                 _now_ms() if now_ms is None else now_ms)
        if not validate_only:
            self._clear_leftovers(name, creation.partitions)
            self._creating.add(name)
        return creation

    def update_topic_config(
        self, name: str, changes: Mapping[str, str | None], *, replace: bool = False,
        validate_only: bool = False,
    ) -> TopicMetadata:
        """Change config overrides: ``None`` removes a key; ``replace=True`` (AlterConfigs)
        drops overrides not mentioned, ``False`` (IncrementalAlterConfigs) keeps them."""
        self._check_open()
        meta = self._require_topic(name)
        overrides = {} if replace else dict(meta.configs)
        for key, value in changes.items():
            if value is None:
                overrides.pop(key, None)
            else:
                overrides[key] = str(value)
        config = self._parse_config(overrides)
        updated = TopicMetadata(name, meta.topic_id, meta.num_partitions, overrides)
        if validate_only:
            return updated
        self._write_topic(updated)
        self._topics[name] = updated
        self._configs[name] = config
        for partition in range(meta.num_partitions):
            if (plog := self._logs.get((name, partition))) is not None:  # hosted here
                plog.update_config(config)
        return updated

    def reconfigure_defaults(self, default_config: LogConfig) -> None:
        """New broker-level log defaults (dynamic broker configs): every topic's config is rebuilt
        on them, its own overrides still winning, and given to its partition logs."""
        self._check_open()
        self.default_config = default_config
        for name, meta in self._topics.items():
            config = self._parse_config(meta.configs)
            self._configs[name] = config
            for partition in range(meta.num_partitions):
                plog = self._logs.get((name, partition))
                if plog is not None:
                    plog.update_config(config)

    def _parse_config(self, overrides: Mapping[str, str]) -> LogConfig:
        try:
            return LogConfig.from_properties(overrides, self.default_config)
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from None

    def _topic_path(self, name: str) -> Path:
        return self.data_dir / TOPICS_DIR / topic_file_name(name)

    def _write_topic(self, meta: TopicMetadata) -> None:
        atomic_write(self._topic_path(meta.name), meta.to_json())

    def _require_topic(self, name: str) -> TopicMetadata:
        meta = self._topics.get(name)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return meta

    # -- lookups ---------------------------------------------------------------------------

    def topics(self) -> dict[str, TopicMetadata]:
        """All topics by name (a copy)."""
        return dict(self._topics)

    def topic(self, name: str) -> TopicMetadata | None:
        """One topic's metadata, or None."""
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        """Look a topic up by its id (Fetch v13+, DeleteTopics by id)."""
        for meta in self._topics.values():
            if meta.topic_id == topic_id:
                return meta
        return None

    def topic_config(self, name: str) -> LogConfig:
        """Effective config of a topic (broker defaults + overrides)."""
        self._require_topic(name)
        return self._configs[name]

    def get_log(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log; ``UnknownTopicOrPartitionError`` if it does not exist."""
        plog = self._logs.get((topic, partition))
        if plog is None:
            raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{partition}")
        return plog

    def logs(self) -> Iterator[tuple[str, int, PartitionLog]]:
        """Every ``(topic, partition, log)``."""
        for (topic, partition), plog in list(self._logs.items()):
            yield topic, partition, plog

    # -- periodic work ---------------------------------------------------------------------

    def run_retention(self, now_ms: int | None = None) -> int:
        """Apply retention to every online log; number of segments deleted."""
        now_ms = _now_ms() if now_ms is None else now_ms
        self.deletions.run_due()
        deleted = 0
        for _, _, plog in self.logs():
            try:
                deleted += plog.apply_retention(now_ms)
            except KafkaStorageError as exc:
                log.warning("retention skipped %s: %s", plog.name, exc)
        return deleted

    def flush_logs(self, now_ms: int | None = None) -> None:
        """fsync rolled segments and honour ``flush.ms`` on every online log."""
        now_ms = _now_ms() if now_ms is None else now_ms
        self.deletions.run_due()
        for _, _, plog in self.logs():
            try:
                plog.maybe_flush(now_ms)
            except KafkaStorageError as exc:
                log.warning("flush skipped %s: %s", plog.name, exc)

    def remove_expired_producers(self, now_ms: int | None = None, *, budget: int | None = None) -> int:
        """Expire idle producer ids (``producer.id.expiration.ms``): on every log, or with a
        ``budget`` on logs holding about that many producers in all, resuming where the last
        call stopped (a broker with many partitions and producers does it in bounded steps)."""
        now_ms = _now_ms() if now_ms is None else now_ms
        if budget is None:
            return sum(plog.remove_expired_producers(now_ms) for _, _, plog in self.logs())
        queue = self._expiry_queue
        if not queue:
            queue.extend(self._logs)
        removed = examined = 0
        while queue and examined < budget:
            plog = self._logs.get(queue.popleft())
            if plog is None:
                continue
            examined += len(plog.producer_state.producers) + 1
            removed += plog.remove_expired_producers(now_ms)
        return removed

    def run_cleaner(self, now_ms: int | None = None) -> str | None:
        """Compact the dirtiest compacted log that needs it, in this thread (one log per call,
        see ``cleaner``); returns its name, or None when no log was cleaned."""
        cleaning = self._start_cleaning(now_ms)
        if cleaning is None:
            return None
        try:
            cleaning.run_inline()
        except Exception as exc:
            return self._end_cleaning(cleaning, exc)
        return self._end_cleaning(cleaning, None)

    async def run_cleaner_in(self, in_thread: InThread, now_ms: int | None = None) -> str | None:
        """:meth:`run_cleaner` with the pass's reading and writing in ``in_thread`` (a worker),
        so the event loop keeps serving clients; the segment swaps run on the event loop. Logs
        being cleaned by another call are skipped, so several calls may run at once."""
        cleaning = self._start_cleaning(now_ms)
        if cleaning is None:
            return None
        try:
            await cleaning.run(in_thread)
        except Exception as exc:
            return self._end_cleaning(cleaning, exc)
        return self._end_cleaning(cleaning, None)

    def abort_cleaning(self, reason: str) -> None:
        """Abort every pass under way (the broker stops); each ends at its worker's next batch."""
        for cleaning in list(self._cleaning.values()):
            cleaning.abort(reason)

    def _start_cleaning(self, now_ms: int | None) -> CleaningPass | None:
        now_ms = _now_ms() if now_ms is None else now_ms
        candidates = []
        for _, _, plog in self.logs():
            if (not plog.config.compacted or plog.offline_reason is not None
                    or plog.name in self._uncleanable or id(plog) in self._cleaning):
                continue
            try:
                candidate = cleanable(plog, read_checkpoint(plog.directory), now_ms)
            except (OSError, KafkaStorageError) as exc:
                log.warning("cleaner skipped %s: %s", plog.name, exc)
                continue
            if candidate.clean_bytes + candidate.cleanable_bytes > 0 and candidate.should_clean:
                candidates.append(candidate)
        if not candidates:
            return None
        chosen = max(candidates, key=lambda c: c.cleanable_ratio)
        plog = chosen.plog
        try:
            cleaning = CleaningPass(plog, chosen, now_ms)
        except OSError as exc:
            raise plog._go_offline(f"cleaning failed: {os_error_text(exc)}") from exc
        self._cleaning[id(plog)] = cleaning
        return cleaning

    def _end_cleaning(self, cleaning: CleaningPass, error: Exception | None) -> str | None:
        """Record a pass's outcome: the checkpoint when it finished, the log uncleanable when its
        data is damaged, nothing when it was aborted; other failures take the log offline."""
        plog = cleaning.plog
        if self._cleaning.get(id(plog)) is cleaning:
            del self._cleaning[id(plog)]
        aborted = cleaning.aborted is not None or cleaning.log_changed()
        try:
            if error is None:
                write_checkpoint(plog.directory, cleaning.end_offset)
                return plog.name
            raise error
        except CleaningAborted as exc:
            log.info("cleaning %s aborted: %s", plog.name, exc)
        except CleanerError as exc:
            if aborted:
                log.info("cleaning %s aborted: %s", plog.name, cleaning.aborted or exc)
                return None
            log.error("cleaning %s stopped (the rest of the log is left as it was); it is not"
                      " cleaned again until the broker restarts: %s", plog.name, exc)
            self._uncleanable.add(plog.name)
        except OSError as exc:
            if aborted:
                log.info("cleaning %s aborted: %s", plog.name, cleaning.aborted or exc)
                return None
            raise plog._go_offline(f"cleaning failed: {os_error_text(exc)}") from exc
        return None

    def run_periodic(self, now_ms: int | None = None) -> None:
        """Retention, flushing and producer expiration in one call."""
        now_ms = _now_ms() if now_ms is None else now_ms
        self.run_retention(now_ms)
        self.flush_logs(now_ms)
        self.remove_expired_producers(now_ms)

    def close(self) -> None:
        """Flush and close every log cleanly (each writes its clean-shutdown marker)."""
        if self._closed:
            return
        self._closed = True
        self.deletions.cancel()  # files still waiting are removed at the next start
        self.abort_cleaning("the log manager is closing")
        for _, _, plog in self.logs():
            try:
                plog.close()
            except (OSError, KafkaStorageError) as exc:
                log.error("closing %s failed: %s", plog.name, exc)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError("the log manager is closed")


def _unlink_logged(path: Path) -> None:
    """Remove a file if it is there; a failure is logged, never raised (used while undoing)."""
    try:
        remove_quietly(path)
    except OSError as exc:
        log.error("cannot remove %s: %s", path, exc)


def _read_properties(path: Path) -> dict[str, str]:
    props = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        props[key.strip()] = value.strip()
    return props


def _read_partition_topic_id(directory: Path) -> uuid.UUID | None:
    try:
        props = _read_properties(directory / PARTITION_METADATA)
        return topic_id_from_string(props["topic_id"])
    except (FileNotFoundError, KeyError, ValueError):
        return None


class TopicCreation:
    """A topic being created (``previous`` None) or grown, its partitions opened a step at a time.

    Invariants: the topic's name is reserved in the manager until :meth:`commit` or
    :meth:`abort`; no other request sees the new partitions before :meth:`commit` (the topic
    metadata file is written last); :meth:`abort` removes every directory it made, and any
    failure of a step aborts before it raises.
    """

    def __init__(self, manager: LogManager, meta: TopicMetadata, previous: TopicMetadata | None,
                 config: LogConfig, now_ms: int):
        self.manager = manager
        self.meta = meta
        self.previous = previous
        self.config = config
        self.now_ms = now_ms
        first = previous.num_partitions if previous is not None else 0
        # on demand: the topic's metadata only, each replica's log made when it is assigned
        last = first if manager.replica_logs_on_demand else meta.num_partitions
        self.partitions = range(first, last)
        self.opened: list[PartitionLog] = []
        self._finished = False

    @property
    def _what(self) -> str:
        name = self.meta.name
        return f"creating topic {name!r}" if self.previous is None else f"adding partitions to {name!r}"

    def step(self, count: int) -> bool:
        """Open up to ``count`` more partitions; True once all are open."""
        manager = self.manager
        try:
            manager._check_open()
            if self.previous is None:
                manager._configs.setdefault(self.meta.name, self.config)
            for partition in self.partitions[len(self.opened):len(self.opened) + count]:
                self.opened.append(manager._open_partition(self.meta, partition, self.now_ms))
        except Exception as exc:
            log.error("%s failed (%s); removing what was made", self._what, exc)
            self.abort()
            if isinstance(exc, KafkaError):
                raise
            raise KafkaStorageError(f"{self._what} failed: {os_error_text(exc)}") from exc
        return len(self.opened) == len(self.partitions)

    def commit(self) -> TopicMetadata:
        """Write the topic's metadata and make the partitions visible (all must be open)."""
        assert len(self.opened) == len(self.partitions) and not self._finished
        manager, name = self.manager, self.meta.name
        try:
            manager._check_open()
            manager._write_topic(self.meta)
        except Exception as exc:
            log.error("%s failed (%s); removing what was made", self._what, exc)
            self.abort(metadata_written=True)
            if isinstance(exc, KafkaError):
                raise
            raise KafkaStorageError(f"{self._what} failed: {os_error_text(exc)}") from exc
        self._finished = True
        manager._creating.discard(name)
        if self.previous is None:
            manager._configs[name] = self.config
        for partition, plog in zip(self.partitions, self.opened, strict=True):
            manager._logs[(name, partition)] = plog
        manager._topics[name] = self.meta
        return self.meta

    def run(self) -> TopicMetadata:
        """Open every partition and commit, in one go."""
        self.step(len(self.partitions))
        return self.commit()

    def abort(self, *, metadata_written: bool = False) -> None:
        """Undo: close and remove the partitions made, restore the topic file. Never raises."""
        if self._finished:
            return
        self._finished = True
        manager, name = self.manager, self.meta.name
        manager._creating.discard(name)
        if self.previous is None:
            path = manager._topic_path(name)
            _unlink_logged(path)
            _unlink_logged(path.with_name(path.name + TMP_SUFFIX))
            manager._sync_topics_dir()
            if name not in manager._topics:
                manager._configs.pop(name, None)
        elif metadata_written:  # the metadata write failed: it may have replaced the file
            try:
                manager._write_topic(self.previous)
            except OSError as again:
                log.error("rewriting the metadata of %s failed: %s", name, again)
        manager._undo_partitions(name, self.partitions, self.opened)
        self.opened = []
