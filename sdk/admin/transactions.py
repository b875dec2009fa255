"""Transactions: ListTransactions (to every broker), DescribeTransactions (to each id's
transaction coordinator), DescribeProducers and the KIP-664 abort (WriteTxnMarkers), both to the
partition's leader: the leader holds the producer state and writes the marker.

``list_transactions_with_prefix`` and ``abort_transactions_with_prefix`` find and end the open
transactions of every transactional id under a prefix, as a sink does on restore (Flink's
KafkaSink aborts its lingering ids the same way): the abort is the fencing InitProducerId a new
producer of the id would send, so the transaction coordinator aborts the transaction, bumps the
epoch and writes the markers itself; unlike KIP-664's abort it needs no cluster permission and
also ends a KIP-939 prepared transaction.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sdk.admin.results import (
    PartitionProducers,
    ProducerState,
    TransactionDescription,
    TransactionListing,
)
from sdk.admin.routing import AdminRouter, Deadline, call_once, run_per_item
from sdk.admin.types import AbortTransactionSpec
from sdk.client.cluster import TopicPartition
from sdk.client.coordinators import CoordinatorType
from sdk.errors import KafkaError, UnsupportedVersionError, make_error
from sdk.protocol.messages import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
    WriteTxnMarkersRequest,
)

__all__ = [
    "OPEN_TRANSACTION_STATES",
    "abort_transaction",
    "abort_transactions_with_prefix",
    "check_ids",
    "describe_producers",
    "describe_transactions",
    "list_transactions",
    "list_transactions_with_prefix",
]

#: ListTransactions: duration_filter from v1, transactional_id_pattern from v2.
LIST_TRANSACTIONS_DURATION_VERSION = 1
LIST_TRANSACTIONS_PATTERN_VERSION = 2
#: ListTransactions' names of the states of a transaction that is not finished: a KIP-939 prepared
#: transaction is "Ongoing" on the coordinator.
OPEN_TRANSACTION_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
#: The transaction timeout of the fencing InitProducerId (any value the broker accepts: the id
#: gets no transaction from it).
FENCING_TIMEOUT_MS = 60_000


def check_ids(values: Iterable[Any], argument: str) -> list[int]:
    ids = list(values)
    for value in ids:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{argument}: bad producer id {value!r}")
    return ids


async def list_transactions(
    router: AdminRouter,
    deadline: Deadline,
    states: list[str],
    producer_ids: list[int],
    duration_ms: int | None,
    pattern: str | None,
) -> list[TransactionListing]:
    if duration_ms is not None and (not isinstance(duration_ms, int) or duration_ms < 0):
        raise ValueError(f"duration_ms: must be an int >= 0, not {duration_ms!r}")
    if pattern is not None and not isinstance(pattern, str):
        raise ValueError(f"transactional_id_pattern: must be a str, not {pattern!r}")
    response = await router.metadata([], deadline)
    brokers = sorted(b.node_id for b in response.brokers)
    min_version = (
        LIST_TRANSACTIONS_PATTERN_VERSION
        if pattern is not None
        else LIST_TRANSACTIONS_DURATION_VERSION
        if duration_ms is not None
        else None
    )
    request = ListTransactionsRequest(
        state_filters=states,
        producer_id_filters=producer_ids,
        duration_filter=-1 if duration_ms is None else duration_ms,
        transactional_id_pattern=pattern,
    )

    async def route(node: int) -> int:
        return node

    async def send(node: int, _nodes: list[int]) -> dict[int, list[TransactionListing] | KafkaError]:
        answer, _ = await router.send(
            node, ListTransactionsRequest.API_KEY, lambda _v: request, deadline, min_version=min_version
        )
        if answer.error_code:
            return {node: make_error(answer.error_code, f"ListTransactions on broker {node}")}
        return {
            node: [
                TransactionListing(t.transactional_id, t.producer_id, t.transaction_state)
                for t in answer.transaction_states
            ]
        }

    answers = await run_per_item(router, brokers, deadline, route=route, send=send)
    listings: dict[str, TransactionListing] = {}
    for node in brokers:
        answer = answers[node]
        if isinstance(answer, KafkaError):
            raise answer
        for listing in answer:
            listings[listing.transactional_id] = listing
    return [listings[t] for t in sorted(listings)]


async def describe_transactions(
    router: AdminRouter, transactional_ids: Sequence[str], deadline: Deadline
) -> dict[str, TransactionDescription]:
    async def route(transactional_id: str) -> int:
        return await router.coordinator(CoordinatorType.TRANSACTION, transactional_id)

    async def send(node: int, ids: list[str]) -> dict[str, TransactionDescription | KafkaError]:
        request = DescribeTransactionsRequest(transactional_ids=ids)
        response, _ = await router.send(
            node, DescribeTransactionsRequest.API_KEY, lambda _v: request, deadline
        )
        answers: dict[str, TransactionDescription | KafkaError] = {}
        for t in response.transaction_states:
            if t.error_code:
                answers[t.transactional_id] = make_error(
                    t.error_code, f"transactional id {t.transactional_id!r}"
                )
                continue
            coordinator = router.coordinators.cached(CoordinatorType.TRANSACTION, t.transactional_id)
            answers[t.transactional_id] = TransactionDescription(
                t.transactional_id,
                t.transaction_state,
                t.producer_id,
                t.producer_epoch,
                t.transaction_timeout_ms,
                t.transaction_start_time_ms if t.transaction_start_time_ms >= 0 else None,
                frozenset(TopicPartition(d.topic, p) for d in t.topics for p in d.partitions),
                -1 if coordinator is None else coordinator,
            )
        return answers

    answers = await run_per_item(
        router,
        transactional_ids,
        deadline,
        route=route,
        send=send,
        reroute=lambda tid: router.forget_coordinator(CoordinatorType.TRANSACTION, tid),
    )
    return {
        tid: answer
        if isinstance(answer, TransactionDescription)
        else TransactionDescription(tid, error=answer)
        for tid, answer in answers.items()
    }


async def describe_producers(
    router: AdminRouter, partitions: Sequence[TopicPartition], deadline: Deadline
) -> dict[TopicPartition, PartitionProducers]:
    async def route(tp: TopicPartition) -> int:
        return await router.leader(tp.topic, tp.partition, deadline)

    async def send(
        node: int, tps: list[TopicPartition]
    ) -> dict[TopicPartition, PartitionProducers | KafkaError]:
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = DescribeProducersRequest(
            topics=[
                DescribeProducersRequest.TopicRequest(name=t, partition_indexes=p)
                for t, p in by_topic.items()
            ]
        )
        response, _ = await router.send(node, DescribeProducersRequest.API_KEY, lambda _v: request, deadline)
        answers: dict[TopicPartition, PartitionProducers | KafkaError] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code:
                    message = f"DescribeProducers {tp.topic}-{tp.partition}"
                    answers[tp] = make_error(
                        p.error_code, f"{message}: {p.error_message}" if p.error_message else message
                    )
                    continue
                answers[tp] = PartitionProducers(
                    tuple(
                        ProducerState(
                            s.producer_id,
                            s.producer_epoch,
                            s.last_sequence,
                            s.last_timestamp,
                            s.coordinator_epoch if s.coordinator_epoch >= 0 else None,
                            s.current_txn_start_offset if s.current_txn_start_offset >= 0 else None,
                        )
                        for s in p.active_producers
                    )
                )
        return answers

    answers = await run_per_item(
        router,
        partitions,
        deadline,
        route=route,
        send=send,
        reroute=lambda tp: router.forget_leaders([tp.topic]),
    )
    return {
        tp: answer if isinstance(answer, PartitionProducers) else PartitionProducers(error=answer)
        for tp, answer in answers.items()
    }


async def abort_transaction(router: AdminRouter, spec: AbortTransactionSpec, deadline: Deadline) -> None:
    tp = spec.topic_partition
    M = WriteTxnMarkersRequest.WritableTxnMarker
    request = WriteTxnMarkersRequest(
        markers=[
            M(
                producer_id=spec.producer_id,
                producer_epoch=spec.producer_epoch,
                transaction_result=False,  # ABORT
                topics=[M.WritableTxnMarkerTopic(name=tp.topic, partition_indexes=[tp.partition])],
                coordinator_epoch=spec.coordinator_epoch,
            )
        ]
    )

    async def send(node: int) -> None:
        response, _ = await router.send(node, WriteTxnMarkersRequest.API_KEY, lambda _v: request, deadline)
        for marker in response.markers:
            for topic in marker.topics:
                for part in topic.partitions:
                    if part.error_code:
                        raise make_error(
                            part.error_code,
                            f"aborting producer {spec.producer_id}'s transaction"
                            f" on {tp.topic}-{tp.partition}",
                        )

    await call_once(
        router,
        deadline,
        route=lambda: router.leader(tp.topic, tp.partition, deadline),
        send=send,
        reroute=lambda: router.forget_leaders([tp.topic]),
    )


def prefix_pattern(prefix: str) -> str:
    """A regular expression, the same in Java and Python, for the ids that start with ``prefix``."""
    return "^" + re.escape(prefix) + ".*"


async def list_transactions_with_prefix(
    router: AdminRouter, deadline: Deadline, prefix: str, states: Sequence[str] = OPEN_TRANSACTION_STATES
) -> list[TransactionListing]:
    """The transactions in ``states`` whose transactional id starts with ``prefix``: filtered by
    the brokers (ListTransactions v2's pattern) where they can, by the client otherwise."""
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"prefix: must be a non-empty str, not {prefix!r}")
    try:
        found = await list_transactions(router, deadline, list(states), [], None, prefix_pattern(prefix))
    except UnsupportedVersionError:  # brokers before ListTransactions v2 (Kafka 3.8)
        found = await list_transactions(router, deadline, list(states), [], None, None)
    return [t for t in found if t.transactional_id.startswith(prefix)]


async def abort_transactions_with_prefix(
    router: AdminRouter,
    deadline: Deadline,
    prefix: str,
    keep: Callable[[str], bool] = lambda _tid: False,
) -> list[str]:
    """Abort the open (or KIP-939 prepared) transaction of every transactional id that starts
    with ``prefix`` and that ``keep`` does not keep; returns the ids aborted, sorted. Each is
    fenced with InitProducerId, so a producer still using the id gets PRODUCER_FENCED."""
    lingering = await list_transactions_with_prefix(router, deadline, prefix)
    ids = sorted(t.transactional_id for t in lingering if not keep(t.transactional_id))

    async def route(transactional_id: str) -> int:
        return await router.coordinator(CoordinatorType.TRANSACTION, transactional_id)

    async def send(node: int, batch: list[str]) -> dict[str, bool | KafkaError]:
        answers: dict[str, bool | KafkaError] = {}
        for transactional_id in batch:

            def fencing(_version: int, tid: str = transactional_id) -> InitProducerIdRequest:
                return InitProducerIdRequest(
                    transactional_id=tid,
                    transaction_timeout_ms=FENCING_TIMEOUT_MS,
                    producer_id=-1,
                    producer_epoch=-1,
                )

            response, _ = await router.send(node, InitProducerIdRequest.API_KEY, fencing, deadline)
            answers[transactional_id] = (
                make_error(response.error_code, f"fencing transactional id {transactional_id!r}")
                if response.error_code
                else True
            )
        return answers

    answers = await run_per_item(
        router,
        ids,
        deadline,
        route=route,
        send=send,
        reroute=lambda tid: router.forget_coordinator(CoordinatorType.TRANSACTION, tid),
    )
    for answer in answers.values():
        if isinstance(answer, KafkaError):
            raise answer
    return ids
