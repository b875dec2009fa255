"""``commit.mode=two-phase``: a whole micro-batch (or batch write) becomes visible at once.

KIP-939's two-phase commit, with Spark's driver as the outside coordinator:

1. Each task writes its rows and its marker in a transaction of its stable transactional id
   (``<prefix>-<partition>``, as in the per-task mode, so a newer attempt fences an older one),
   ``prepare_transaction()``s it and reports (transactional id, ``PreparedTxnState``) in its
   commit message. Nothing is visible yet: read_committed readers stop at the prepared
   transactions.
2. The driver's ``commit(messages, batch_id)`` keeps every reported transaction with a producer
   of its id (``init_transactions(keep_prepared_transaction=True)``, which fences every task
   attempt) and checks it is the reported one; then it records the intent, every reported
   (transactional id, state) of the batch, in the intent topic (acks=all, flushed), and
   completes each transaction (``complete_transaction(state)``). If a reported transaction is
   gone (a later attempt of its task aborted it), nothing is recorded, the others are aborted
   and the batch fails (``CommitLostError``): its re-run writes it again, still all at once.
3. Recovery happens where the next transaction of an id begins: a task's producer keeps the
   transaction left open on its id, if any. If an intent names that transaction, the task rolls
   it forward (commits it); if none does after ``two.phase.intent.wait.ms``, the transaction is
   stale (its batch failed or its driver died before deciding) and is aborted. The marker check
   that follows then skips a batch whose transaction was just rolled forward. The driver, too,
   finishes what a task rolled forward: it accepts a transaction that is no longer open when the
   marker shows it committed.

Why a Kafka topic for the intents: the record must survive the driver being SIGKILLed right
after writing it, and it must be readable from the executors, which do the recovery; a file
under the checkpoint would only be readable where the checkpoint's file system is mounted (a
driver-local path, or HDFS/S3 that Python's ``open`` cannot read), while the intent topic lives
on the cluster whose transactions it decides, is replicated like the data (acks=all), and is read
with the same client. One record per committed batch, keyed by the query's transactional id
prefix (so all of a query's intents share one partition); recovery looks for the query's newest
intent there, reading backwards from the end (``newest_intent``). The topic is compacted (the
sink creates it so): the newest intent of each prefix is all recovery ever reads.

An intent names its owner (the streaming query's id, or the batch write's) beside the batch, as
the markers do. Recovery does not need it to match: it rolls a kept transaction forward only when
an intent records that transaction's exact state (producer id and epoch), which no other
transaction has, so the intent is that transaction's own decision, whoever wrote it (a batch
write sharing its prefix with an earlier one completes the earlier write's decision); a stream
never shares its prefix (``ownership.py``).

Conditions: the broker enables ``transaction.two.phase.commit.enable`` (Kafka's default is off);
a prepared transaction never times out on the broker, so a query that stops with a prepared
batch (its driver killed) holds read_committed readers of the output partitions back until the
query runs again (or a producer with that id ends the transaction).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from sdk.client.cluster import TopicPartition
from sdk.errors import TransactionalIdAuthorizationFailedError, UnsupportedVersionError
from sdk.producer.prepared_state import PreparedTxnState
from sdk.records import murmur2_partition
from sdk.sync import Consumer, Producer

log = logging.getLogger(__name__)

#: Values of the sink option ``commit.mode``.
PER_TASK, TWO_PHASE = "per-task", "two-phase"
#: Where the driver records its intents unless ``intent.topic`` says otherwise.
DEFAULT_INTENT_TOPIC = "topicwright-spark-sink-intents"
#: Records of the intent topic recovery reads per step while it looks backwards for an intent.
INTENT_LOOKBACK = 2000


class TwoPhaseCommitUnavailableError(RuntimeError):
    """The broker offers no two-phase commit: it advertises InitProducerId below v6 (Kafka 4.1
    and the reference broker when ``transaction.two.phase.commit.enable`` is off) or refuses it
    with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (a broker serving v6 with the setting off)."""


def init_two_phase(producer: Producer, transactional_id: str) -> None:
    """``init_transactions(keep_prepared_transaction=True)``, with the broker setting it needs
    named when the broker refuses."""
    try:
        producer.init_transactions(keep_prepared_transaction=True)
    except (TransactionalIdAuthorizationFailedError, UnsupportedVersionError) as exc:
        raise TwoPhaseCommitUnavailableError(
            f"{transactional_id}: the broker offers no two-phase commit ({exc}); "
            "commit.mode=two-phase needs the broker setting transaction.two.phase.commit.enable=true "
            "(and, with ACLs, the right to use the transactional id)") from exc


class CommitLostError(RuntimeError):
    """A reported prepared transaction was neither open nor committed when the driver came to
    complete it (a later attempt aborted it): the batch is failed, its re-run writes it again."""


def record_intent(producer_settings: Mapping[str, Any], intent_topic: str, prefix: str,
                  marker: Mapping[str, Any], transactions: Mapping[str, str]) -> None:
    """Durably record that ``transactions`` (transactional id -> state) are to be committed;
    ``marker``: the batch's owner and id (``Marker.record()``)."""
    value = json.dumps({"prefix": prefix, **marker, "transactions": dict(transactions)}).encode()
    settings = {**producer_settings, "acks": "all"}
    settings.pop("transaction_timeout_ms", None)
    with Producer(**settings) as producer:
        producer.send(intent_topic, value, key=prefix.encode()).get(30)


def recorded_states(consumer_settings: Mapping[str, Any], intent_topic: str, prefix: str,
                    transactional_id: str) -> set[str]:
    """The states the newest intent of ``prefix`` recorded for ``transactional_id`` (empty if
    none does). The newest is the one that matters: a query's batches, and so its intents, come
    one after another, so a transaction left prepared belongs to the query's last batch, whose
    intent, if the driver got to record it, is the query's newest."""
    intent = newest_intent(consumer_settings, intent_topic, prefix)
    if intent is None or transactional_id not in intent.get("transactions", {}):
        return set()
    return {intent["transactions"][transactional_id]}


def newest_intent(
    consumer_settings: Mapping[str, Any], intent_topic: str, prefix: str
) -> dict[str, Any] | None:
    """The newest intent record of ``prefix``, or None. Intents are keyed by the prefix, so they
    all sit in the partition the key hashes to (the producer's default partitioner, murmur2);
    that partition is read backwards in windows of ``INTENT_LOOKBACK`` records until one of the
    prefix turns up or the partition's start is reached, which costs one window unless many other
    queries wrote intents since."""
    with Consumer(**consumer_settings, enable_auto_commit=False, isolation_level="read_committed",
                  auto_offset_reset="earliest") as consumer:
        partitions = consumer.partitions_for_topic(intent_topic)
        if partitions is None:
            consumer.topics()
            partitions = consumer.partitions_for_topic(intent_topic)
        if not partitions:
            return None
        ordered = sorted(partitions)
        tp = TopicPartition(intent_topic, ordered[murmur2_partition(prefix.encode(), len(ordered))])
        consumer.assign([tp])
        start = consumer.beginning_offsets([tp])[tp]
        end = consumer.end_offsets([tp])[tp]
        while end > start:
            window_start = max(start, end - INTENT_LOOKBACK)
            found = [intent for intent in _read_intents(consumer, tp, window_start, end)
                     if intent.get("prefix") == prefix]
            if found:
                return found[-1]
            end = window_start
        return None


def _read_intents(consumer: Consumer, tp: TopicPartition, start: int, end: int) -> list[dict[str, Any]]:
    """The readable intent records of ``tp`` in [start, end), in offset order."""
    consumer.seek(tp, start)
    intents: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while consumer.position(tp) < end:
        for batch in consumer.getmany(timeout_ms=300).values():
            for record in batch:
                if record.offset >= end:
                    break
                try:
                    intents.append(json.loads(record.value or b""))
                except ValueError:
                    log.warning("intent topic %s: unreadable record at %s", tp.topic, record.offset)
        if time.monotonic() > deadline:
            raise TimeoutError(f"could not read the intent topic {tp.topic}[{tp.partition}] up to {end}")
    return intents


def resolve_kept_transaction(producer: Producer, consumer_settings: Mapping[str, Any], intent_topic: str,
                             prefix: str, transactional_id: str, wait_s: float) -> str | None:
    """End the transaction ``producer`` kept (``init_transactions(keep_prepared_transaction=True)``):
    commit it if an intent names it, abort it if none does within ``wait_s`` (a driver about
    to record one gets that long). Returns "rolled forward", "aborted" or None (nothing kept)."""
    kept = producer.prepared_transaction_state
    if kept is None:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        if str(kept) in recorded_states(consumer_settings, intent_topic, prefix, transactional_id):
            producer.complete_transaction(kept)
            log.info("%s: rolled the recorded transaction %s forward", transactional_id, kept)
            return "rolled forward"
        if time.monotonic() >= deadline:
            producer.complete_transaction(PreparedTxnState())  # no state matches: abort
            log.info("%s: aborted the stale transaction %s (no intent)", transactional_id, kept)
            return "aborted"
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def commit_batch(producer_settings: Mapping[str, Any], intent_topic: str, prefix: str,
                 marker: Mapping[str, Any], transactions: Mapping[str, str],
                 committed_marker: Callable[[str], bool],
                 after_intent: Callable[[], None] = lambda: None) -> dict[str, str]:
    """The driver's side of one batch (see the module's docstring, step 2): keep and check every
    reported transaction, record the intent, complete them. ``committed_marker(id)``: whether
    that id's marker shows the batch committed (a task rolled an earlier intent forward).
    Returns each transactional id's outcome."""
    keepers: dict[str, Producer] = {}
    outcomes: dict[str, str] = {}
    try:
        for transactional_id, state in transactions.items():
            keeper = Producer(**producer_settings, transactional_id=transactional_id,
                              enable_two_phase_commit=True)
            keepers[transactional_id] = keeper
            init_two_phase(keeper, transactional_id)
            if keeper.prepared_transaction_state != PreparedTxnState.parse(state):
                if keeper.prepared_transaction_state is not None:  # never reported: abort it (and
                    keeper.complete_transaction(PreparedTxnState())  # its pending marker) first
                outcomes[transactional_id] = ("already committed" if committed_marker(transactional_id)
                                              else "lost")
        lost = [tid for tid, outcome in outcomes.items() if outcome == "lost"]
        if lost:
            for keeper in keepers.values():
                if keeper.prepared_transaction_state is not None:
                    keeper.complete_transaction(PreparedTxnState())  # abort: the batch re-runs
            raise CommitLostError(f"prepared transactions of {lost} are gone (aborted by a later attempt); "
                                  "the batch is failed, nothing of it committed")
        record_intent(producer_settings, intent_topic, prefix, marker, transactions)
        after_intent()
        for transactional_id, keeper in keepers.items():
            if transactional_id in outcomes:
                continue
            state = transactions[transactional_id]
            try:
                keeper.complete_transaction(PreparedTxnState.parse(state))
                outcomes[transactional_id] = "committed"
            except Exception:  # fenced: a task is rolling the intent forward; see who finished
                log.warning("%s: completing %s failed; checking again", transactional_id, state,
                            exc_info=True)
                outcomes[transactional_id] = complete_recorded(
                    producer_settings, transactional_id, state,
                    lambda t=transactional_id: committed_marker(t))
    finally:
        for keeper in keepers.values():
            keeper.close()
    return outcomes


def complete_recorded(producer_settings: Mapping[str, Any], transactional_id: str, state: str,
                      committed_marker: Any, attempts: int = 3) -> str:
    """The driver's second phase for one transaction: keep it and commit it. A transaction no
    longer open is fine if ``committed_marker()`` (whether the task's marker shows the batch
    committed) says a task rolled it forward; otherwise ``CommitLostError``."""
    wanted = PreparedTxnState.parse(state)
    for attempt in range(attempts):
        try:
            with Producer(**producer_settings, transactional_id=transactional_id,
                          enable_two_phase_commit=True) as producer:
                init_two_phase(producer, transactional_id)
                kept = producer.prepared_transaction_state
                if kept == wanted:
                    producer.complete_transaction(wanted)
                    return "committed"
                if kept is not None:  # a later, undecided transaction of this id: never reported
                    producer.complete_transaction(PreparedTxnState())
                if committed_marker():
                    return "already committed"
                raise CommitLostError(f"{transactional_id}: the prepared transaction {state} is gone "
                                      f"(found {kept or 'none'}) and its batch marker is not committed")
        except CommitLostError:
            raise
        except Exception:  # fenced by a task rolling it forward at the same moment, a broker restart
            if attempt == attempts - 1:
                raise
            log.warning("%s: completing %s failed; retrying", transactional_id, state, exc_info=True)
            time.sleep(0.5)
    raise AssertionError("unreachable")
