"""The workload's confluent-kafka clients: the same operations through librdkafka, so the broker
is checked against a client nobody here wrote (and the SDK's clients against its behaviour).

* ``ck-producer``: idempotent producer, sends to every partition;
* ``ck-txn``: transactional producer (``transactional.id`` kept across incarnations), sends 1-4
  values to its own partitions per transaction, flushes, commits (one in eight aborts).

Both stop on SIGTERM after finishing what they started. librdkafka's error model decides the
recorded outcome of a commit: ``txn_requires_abort()`` means it did not happen (``fail``, then an
abort), ``retriable()`` is retried, anything else is unknown (``info``) and the producer is
replaced.
"""

from __future__ import annotations

import argparse
import itertools
import random
import signal
from typing import Any

from confluent_kafka import KafkaError as CKError
from confluent_kafka import KafkaException
from confluent_kafka import Producer as CKProducer

from tools.anomaly.history import Recorder

CALL_TIMEOUT_S = 10.0


class _Stop:
    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._request)

    def _request(self, *_: object) -> None:
        self.requested = True


def _delivered(rec: Recorder, value: str, txn: str | None) -> Any:
    def callback(error: CKError | None, message: Any) -> None:
        if error is not None:
            rec.record("info", "send", value=value, txn=txn, error=str(error))
        else:
            offset = message.offset()
            rec.record("ok", "send", value=value, txn=txn, partition=message.partition(), offset=offset)

    return callback


def run_idempotent(args: argparse.Namespace, rec: Recorder) -> None:
    stop = _Stop()
    producer = CKProducer(
        {
            "bootstrap.servers": args.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60_000,
        }
    )
    rng = random.Random()
    seq = itertools.count()
    while not stop.requested:
        for _ in range(rng.randint(1, 5)):
            value = f"{rec.process}-{next(seq)}"
            rec.record("invoke", "send", value=value, txn=None)
            partition = rng.randrange(args.partitions)
            producer.produce(
                args.topic, value.encode(), partition=partition, on_delivery=_delivered(rec, value, None)
            )
        producer.poll(0.02)
    producer.flush(60)


def _transactional(args: argparse.Namespace, rec: Recorder) -> CKProducer:
    producer = CKProducer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": f"{args.topic}-{rec.client}",
            "transaction.timeout.ms": 10_000,
            "message.timeout.ms": 9_000,
            "linger.ms": 2,
        }
    )
    producer.init_transactions(CALL_TIMEOUT_S * 3)
    return producer


def run_transactional(args: argparse.Namespace, rec: Recorder) -> None:
    stop = _Stop()
    own = [int(p) for p in args.own.split(",")]
    rng = random.Random()
    seq = itertools.count()
    txn_numbers = itertools.count()
    producer: CKProducer | None = None
    while not stop.requested:
        if producer is None:
            try:
                producer = _transactional(args, rec)
            except KafkaException:
                continue  # the broker is down or slow: init again (fences any predecessor)
        txn = f"{rec.process}#{next(txn_numbers)}"
        try:
            producer.begin_transaction()
        except KafkaException:
            producer = None
            continue
        rec.record("ok", "txn-begin", txn=txn)
        for _ in range(rng.randint(1, 4)):
            value = f"{rec.process}-{next(seq)}"
            rec.record("invoke", "send", value=value, txn=txn)
            partition = rng.choice(own)
            producer.produce(
                args.topic, value.encode(), partition=partition, on_delivery=_delivered(rec, value, txn)
            )
        producer.flush(CALL_TIMEOUT_S)
        ended = rng.random() >= 1 / 8 and _commit(producer, rec, txn)
        if not ended and not _abort(producer, rec, txn):
            producer = None
    if producer is not None:
        producer.flush(CALL_TIMEOUT_S)


def _commit(producer: CKProducer, rec: Recorder, txn: str) -> bool:
    """Commit; False when the transaction must be aborted instead."""
    rec.record("invoke", "txn-commit", txn=txn)
    for attempt in range(1, 7):
        try:
            producer.commit_transaction(CALL_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            if error.retriable() and attempt < 6:
                continue
            kind = "fail" if error.txn_requires_abort() else "info"
            rec.record(kind, "txn-commit", txn=txn, error=str(error))
            return False
        rec.record("ok", "txn-commit", txn=txn)
        return True
    raise AssertionError("unreachable: the last attempt records an outcome")


def _abort(producer: CKProducer, rec: Recorder, txn: str) -> bool:
    """Abort; False when the producer is no use any more (a successor will fence it)."""
    rec.record("invoke", "txn-abort", txn=txn)
    for _ in range(5):
        try:
            producer.abort_transaction(CALL_TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].retriable():
                continue
            rec.record("info", "txn-abort", txn=txn, error=str(exc.args[0]))
            return False
        rec.record("ok", "txn-abort", txn=txn)
        return True
    rec.record("info", "txn-abort", txn=txn, error="abort still retriable after 5 attempts")
    return False
