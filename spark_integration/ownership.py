"""Whose a transactional id prefix is, and whose a batch marker is.

A marker (the offset a task's transaction commits for its own consumer group, see ``writer.py``)
says which batch was committed; on its own it cannot say for whom. A second streaming query
started with a new checkpoint and the same ``transactional.id.prefix`` would find the first
query's markers past its own batch ids and skip every batch as already written. So:

* every marker names its owner in the offset's metadata: ``query:<id>`` for a streaming query
  (Spark's query id, kept in the checkpoint, so it survives restarts; never the run id) and
  ``write:<id>`` for one batch write (``df.write``). A task only takes a marker of its own owner
  as its own; a stream that finds any other marker under its transactional id (another query's,
  a batch write's, or one naming no owner) refuses to run, and a batch write that finds a
  stream's (or an ownerless) marker refuses too. Batch writes may share a prefix with each other:
  another write's marker only means "not this write's".
* a prefix the user chose is claimed before any task creates a producer: the first claim record
  of the prefix in partition 0 of the marker topic (``<prefix>`` -> its owner: ``query:<id>``, or
  ``batch writes``) decides, for every reader alike, since the log orders the claims. A task
  appends its claim when it finds none, then reads the log again. A second query with the
  prefix, running or not, is thus refused before it can fence the owner's transactions, and of
  two starting at once exactly one wins. Default prefixes (the query id or a random write id)
  belong to one owner by construction and are not claimed. The marker topic keeps its records
  forever (``retention.ms=-1``), one per claimed prefix.

Claims are final, so each process remembers the ones it has read (and how far it read).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sdk.client.cluster import TopicPartition
from sdk.consumer.records import OffsetAndMetadata
from sdk.sync import Consumer, Producer

#: Owner strings: a streaming query's, a batch write's; and the claim of batch writes' prefixes.
QUERY_OWNER, WRITE_OWNER = "query:", "write:"
BATCH_WRITES = "batch writes"


class PrefixInUseError(RuntimeError):
    """The transactional id prefix, or a marker under it, belongs to another query or writer."""


@dataclass(frozen=True)
class Marker:
    """What a task's transaction records besides its rows: whose batch (``owner``) and, for a
    streaming query, which micro-batch (``batch``; None for a batch write)."""

    owner: str
    batch: int | None = None

    @classmethod
    def of_query(cls, query_id: str, batch: int) -> Marker:
        return cls(f"{QUERY_OWNER}{query_id}", batch)

    @classmethod
    def of_write(cls, write_id: str) -> Marker:
        return cls(f"{WRITE_OWNER}{write_id}")

    @property
    def offset(self) -> int:
        """The committed offset: batch id + 1 (micro-batch ids only grow), 0 for a batch write
        (whose marker only needs to be found, with its owner)."""
        return self.batch + 1 if self.batch is not None else 0

    def committed_offset(self) -> OffsetAndMetadata:
        return OffsetAndMetadata(self.offset, json.dumps({"owner": self.owner}))

    def aborted_offset(self) -> OffsetAndMetadata:
        """The marker a failed batch write's driver commits under each of its ids: a task of the
        write that starts after it stops (``was_aborted``) instead of opening a transaction."""
        return OffsetAndMetadata(self.offset, json.dumps({"owner": self.owner, "aborted": True}))

    def record(self) -> dict[str, Any]:
        """The marker as the fields of an intent record."""
        return {"owner": self.owner, "batch": self.batch}


def owner_of(committed: OffsetAndMetadata) -> str | None:
    """The owner a committed marker names (None: it names none)."""
    try:
        owner = json.loads(committed.metadata or "null")
    except ValueError:
        return None
    found = owner.get("owner") if isinstance(owner, dict) else None
    return found if isinstance(found, str) else None


def _described(owner: str | None) -> str:
    if owner is None:
        return "a writer that recorded no owner"
    if owner.startswith(QUERY_OWNER):
        return f"the streaming query {owner[len(QUERY_OWNER):]}"
    if owner.startswith(WRITE_OWNER):
        return f"the batch write {owner[len(WRITE_OWNER):]}"
    return owner


def refusal(prefix: str, ours: str, theirs: str | None) -> PrefixInUseError:
    """The error for ``ours`` (an owner, or BATCH_WRITES) finding ``prefix`` used by ``theirs``,
    saying what to change."""
    used_by = "batch writes" if theirs == BATCH_WRITES else _described(theirs)
    if ours.startswith(QUERY_OWNER):
        query = ours[len(QUERY_OWNER):]
        advice = "Set a new 'transactional.id.prefix' for this query"
        if theirs is not None and theirs.startswith(QUERY_OWNER):
            advice += (f", or restart {used_by} from its own checkpoint (its old checkpointLocation) "
                       "to continue it")
        return PrefixInUseError(
            f"transactional.id.prefix {prefix!r} belongs to {used_by}, not to the streaming query {query}: "
            f"its batch markers would be taken for this query's (and its batches skipped as written), and "
            f"if it is running, each would fence the other's transactions. {advice}.")
    return PrefixInUseError(
        f"transactional.id.prefix {prefix!r} belongs to {used_by}: a batch write would overwrite its batch "
        "markers. Set another 'transactional.id.prefix' for the batch write.")


def was_aborted(found: OffsetAndMetadata | None, marker: Marker) -> bool:
    """Whether ``found`` is ``marker``'s write's ``aborted_offset``: Spark's driver gave the write
    up."""
    if found is None or owner_of(found) != marker.owner:
        return False
    try:
        return bool(json.loads(found.metadata or "null").get("aborted"))
    except (ValueError, AttributeError):
        return False


def already_committed(found: OffsetAndMetadata | None, marker: Marker, prefix: str) -> bool:
    """Whether the marker ``found`` under a transactional id of ``prefix`` shows ``marker``'s batch
    committed; ``PrefixInUseError`` when the marker is someone else's (see the module docstring)."""
    if found is None:
        return False
    owner = owner_of(found)
    if marker.batch is not None:
        if owner != marker.owner:
            raise refusal(prefix, marker.owner, owner)
        return found.offset >= marker.offset
    if owner is not None and owner.startswith(WRITE_OWNER):
        return owner == marker.owner
    raise refusal(prefix, marker.owner, owner)


@dataclass
class _ClaimLog:
    """What this process has read of one marker topic's claims."""

    first: dict[str, str] = field(default_factory=dict)
    position: int = 0


_claim_logs: dict[tuple[str, str], _ClaimLog] = {}
_claims_lock = threading.Lock()


def claim_prefix(consumer_settings: Mapping[str, Any], producer_settings: Mapping[str, Any],
                 marker_topic: str, prefix: str, claimant: str) -> None:
    """Claim ``prefix`` for ``claimant`` (a query's owner string, or BATCH_WRITES), or raise
    ``PrefixInUseError`` if its first claim is someone else's. The marker topic must exist."""
    key = (str(consumer_settings.get("bootstrap_servers")), marker_topic)
    with _claims_lock:
        log = _claim_logs.setdefault(key, _ClaimLog())
        owner = log.first.get(prefix) or _read_claims(consumer_settings, marker_topic, log).get(prefix)
        if owner is None:
            _append_claim(producer_settings, marker_topic, prefix, claimant)
            owner = _read_claims(consumer_settings, marker_topic, log).get(prefix)
    if owner != claimant:
        raise refusal(prefix, claimant, owner)


def _read_claims(consumer_settings: Mapping[str, Any], marker_topic: str, log: _ClaimLog) -> dict[str, str]:
    """Read the claims past ``log.position`` into ``log``; returns ``log.first``."""
    tp = TopicPartition(marker_topic, 0)
    with Consumer(**consumer_settings, enable_auto_commit=False, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        start = max(log.position, consumer.beginning_offsets([tp])[tp])
        end = consumer.end_offsets([tp])[tp]
        consumer.seek(tp, start)
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end:
            for record in consumer.getmany(tp, timeout_ms=300).get(tp, ()):
                if record.offset >= end:
                    break
                try:
                    claim = json.loads(record.value or b"")
                    prefix, owner = claim["prefix"], claim["owner"]
                except (ValueError, KeyError, TypeError):
                    continue  # not a claim: the marker topic holds nothing else of ours
                log.first.setdefault(prefix, owner)
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read the claims in {marker_topic}[0] up to offset {end}")
        log.position = end
    return log.first


def _append_claim(producer_settings: Mapping[str, Any], marker_topic: str, prefix: str, owner: str) -> None:
    settings = {**producer_settings, "acks": "all"}
    settings.pop("transaction_timeout_ms", None)
    with Producer(**settings) as producer:
        value = json.dumps({"prefix": prefix, "owner": owner}).encode()
        producer.send(marker_topic, value, key=prefix.encode(), partition=0).get(30)
