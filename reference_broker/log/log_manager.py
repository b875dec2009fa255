"""All partition logs of one data directory, and the topic metadata that goes with them.

Layout of ``data_dir``::

    meta.properties                 cluster.id, node.id, directory.id, version=1 (Kafka KRaft form)
    .topics/<topic>.json            topic id, partition count, config overrides (the commit point)
    <topic>-<partition>/            one PartitionLog each, plus partition.metadata (topic id)

Every metadata file is replaced atomically (temp file, fsync, rename, fsync dir). Topic creation
writes the partition directories first and the topic file last; deletion removes the topic file
first, then renames each partition directory to ``...-delete`` and removes it. So after a crash:
a partition directory whose topic file is missing, or whose ``partition.metadata`` names another
topic id, is *stray* and is renamed ``<dir>.<random>-stray`` (never silently deleted, never
served); leftover ``-delete`` directories are removed; a missing partition directory of a known
topic is recreated empty (with a warning).

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

from reference_broker.log._files import atomic_write, fsync_dir, remove_quietly
from reference_broker.log.config import LogConfig
from reference_broker.log.partition_log import PartitionLog
from sdk.protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
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
    ):
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / TOPICS_DIR).mkdir(exist_ok=True)
        self.default_config = default_config or LogConfig()
        self.node_id = node_id
        self.cluster_id = self._init_meta_properties(node_id, cluster_id)
        self._topics: dict[str, TopicMetadata] = {}
        self._configs: dict[str, LogConfig] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._closed = False
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

    # -- discovery -------------------------------------------------------------------------

    def _load(self, now_ms: int) -> None:
        meta: TopicMetadata | None
        for path in sorted((self.data_dir / TOPICS_DIR).glob("*.json")):
            try:
                meta = TopicMetadata.from_json(path.read_bytes())
                config = LogConfig.from_properties(meta.configs, self.default_config)
            except (ValueError, KeyError, TypeError) as exc:
                log.error("ignoring unreadable topic metadata %s: %s", path, exc)
                continue
            self._topics[meta.name] = meta
            self._configs[meta.name] = config
        for path in sorted(self.data_dir.iterdir()):
            if not path.is_dir() or path.name.startswith("."):
                continue
            if path.name.endswith("-delete"):
                shutil.rmtree(path, ignore_errors=True)
                continue
            match = _PARTITION_DIR.match(path.name)
            if match is None:
                continue
            topic, partition = match.group(1), int(match.group(2))
            meta = self._topics.get(topic)
            stored_id = _read_partition_topic_id(path)
            if meta is None or partition >= meta.num_partitions or (
                stored_id is not None and stored_id != meta.topic_id
            ):
                self._quarantine(path)
                continue
            self._logs[(topic, partition)] = self._open_partition(meta, partition, now_ms)
        for meta in self._topics.values():
            for partition in range(meta.num_partitions):
                if (meta.name, partition) not in self._logs:
                    log.warning("partition directory %s-%d is missing; creating it empty",
                                meta.name, partition)
                    self._logs[(meta.name, partition)] = self._open_partition(meta, partition, now_ms)

    def _quarantine(self, path: Path) -> None:
        target = path.with_name(f"{path.name}.{uuid.uuid4().hex}-stray")
        log.warning("partition directory %s belongs to no known topic (or another topic id);"
                    " moved to %s", path, target.name)
        path.rename(target)

    def _open_partition(self, meta: TopicMetadata, partition: int, now_ms: int) -> PartitionLog:
        directory = self.data_dir / f"{meta.name}-{partition}"
        plog = PartitionLog.open(directory, self._configs[meta.name], now_ms=now_ms)
        if _read_partition_topic_id(directory) != meta.topic_id:
            body = f"version: 0\ntopic_id: {topic_id_to_string(meta.topic_id)}\n"
            atomic_write(directory / PARTITION_METADATA, body.encode())
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
        self._check_open()
        validate_topic_name(name)
        if name in self._topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        canonical = name.replace(".", "_")
        for other in self._topics:
            if other.replace(".", "_") == canonical:
                raise InvalidTopicError(f"topic {name!r} collides with existing topic {other!r}")
        if num_partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, not {num_partitions}")
        overrides = {k: str(v) for k, v in (configs or {}).items() if v is not None}
        config = self._parse_config(overrides)
        meta = TopicMetadata(name, topic_id or uuid.uuid4(), num_partitions, overrides)
        if validate_only:
            return meta
        now_ms = _now_ms() if now_ms is None else now_ms
        for partition in range(num_partitions):
            leftover = self.data_dir / f"{name}-{partition}"
            if leftover.exists():  # never adopt data the new topic did not write
                self._quarantine(leftover)
        self._configs[name] = config
        opened = []
        try:
            for partition in range(num_partitions):
                opened.append(self._open_partition(meta, partition, now_ms))
            self._write_topic(meta)
        except OSError:
            for plog in opened:
                plog.delete()
            del self._configs[name]
            raise
        self._topics[name] = meta
        for partition, plog in enumerate(opened):
            self._logs[(name, partition)] = plog
        return meta

    def delete_topic(self, name: str) -> TopicMetadata:
        """Delete a topic and all its data; returns what was deleted."""
        self._check_open()
        meta = self._require_topic(name)
        remove_quietly(self._topic_path(name))
        fsync_dir(self.data_dir / TOPICS_DIR)
        del self._topics[name]
        del self._configs[name]
        for partition in range(meta.num_partitions):
            plog = self._logs.pop((name, partition), None)
            if plog is not None:
                plog.delete()
        return meta

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False,
                          now_ms: int | None = None) -> TopicMetadata:
        """Grow a topic to ``total`` partitions (Kafka never shrinks)."""
        self._check_open()
        meta = self._require_topic(name)
        if total <= meta.num_partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {meta.num_partitions} partitions; {total} is not an increase")
        updated = TopicMetadata(name, meta.topic_id, total, meta.configs)
        if validate_only:
            return updated
        now_ms = _now_ms() if now_ms is None else now_ms
        for partition in range(meta.num_partitions, total):
            leftover = self.data_dir / f"{name}-{partition}"
            if leftover.exists():
                self._quarantine(leftover)
            self._logs[(name, partition)] = self._open_partition(updated, partition, now_ms)
        self._write_topic(updated)
        self._topics[name] = updated
        return updated

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
            self._logs[(name, partition)].update_config(config)
        return updated

    def _parse_config(self, overrides: Mapping[str, str]) -> LogConfig:
        try:
            return LogConfig.from_properties(overrides, self.default_config)
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from None

    def _topic_path(self, name: str) -> Path:
        return self.data_dir / TOPICS_DIR / f"{name}.json"

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
        for _, _, plog in self.logs():
            try:
                plog.maybe_flush(now_ms)
            except KafkaStorageError as exc:
                log.warning("flush skipped %s: %s", plog.name, exc)

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Expire idle producer ids on every log (``producer.id.expiration.ms``)."""
        now_ms = _now_ms() if now_ms is None else now_ms
        return sum(plog.remove_expired_producers(now_ms) for _, _, plog in self.logs())

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
        for _, _, plog in self.logs():
            try:
                plog.close()
            except (OSError, KafkaStorageError) as exc:
                log.error("closing %s failed: %s", plog.name, exc)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError("the log manager is closed")


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
