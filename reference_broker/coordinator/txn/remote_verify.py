"""Asking another node's transaction coordinator about a transaction (cluster mode; Kafka's
``AddPartitionsToTxnManager``).

A partition leader receiving a transactional produce, and a group coordinator receiving a
TxnOffsetCommit, check the transaction with its coordinator, which may be another node: one
AddPartitionsToTxn v4+ request (the brokers' batched form) for the producer's partitions, with
``verify_only`` for transactions v1 clients (the partition must already be in the ongoing
transaction) and without it for transactions v2 clients (the coordinator adds it, as the client
sends no AddPartitionsToTxn itself). The answer is an error code per partition; an unreachable or
unknown coordinator is COORDINATOR_NOT_AVAILABLE for each (the callers translate it into what
their clients retry).

The requests go over connections of their own, never those the replica fetchers use: the
coordinator answers an add only once its ``__transaction_state`` ISR holds it, which may need
this very node's next fetch, and a node serves one request per connection at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from sdk.protocol.errors import ErrorCode as E

log = logging.getLogger("reference_broker.txn_coordinator")

TopicPartition = tuple[str, int]
#: how long a verification waits for the coordinator's answer
VERIFY_TIMEOUT_S = 10.0


class RemoteTxnVerifier:
    """Sends AddPartitionsToTxn to the node coordinating a transactional id."""

    def __init__(
        self,
        *,
        coordinator_of: Callable[[str], int | None],
        channels: Any,
        address_of: Callable[[int], tuple[str, int] | None],
    ) -> None:
        self.coordinator_of = coordinator_of
        #: a ``PeerChannels`` of this verifier's own (see the module docstring)
        self.channels = channels
        self.address_of = address_of

    async def send(self, node: int, request: Any, **options: Any) -> Any:
        address = self.address_of(node)
        if address is None:
            raise ConnectionError(f"node {node} has no known address")
        self.channels.update(node, *address)
        return await self.channels.send(node, request, **options)

    async def stop(self) -> None:
        await self.channels.close()

    async def check(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        *,
        add: bool,
    ) -> dict[TopicPartition, int]:
        """Each partition's error code from the coordinator (0: in the transaction, or added)."""
        from sdk.protocol.messages import AddPartitionsToTxnRequest as R

        wanted = sorted(set(partitions))
        node = self.coordinator_of(transactional_id)
        if node is None:
            return dict.fromkeys(wanted, E.COORDINATOR_NOT_AVAILABLE)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in wanted:
            by_topic.setdefault(topic, []).append(partition)
        request = R(transactions=[R.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=not add,
            topics=[R.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()])])
        try:
            response: Any = await self.send(node, request, version=5, timeout_s=VERIFY_TIMEOUT_S)
        except Exception as exc:  # the coordinator moved or died: the client retries
            log.info("verifying %s with node %d: %s", transactional_id, node, exc)
            return dict.fromkeys(wanted, E.COORDINATOR_NOT_AVAILABLE)
        if response.error_code:
            return dict.fromkeys(wanted, response.error_code)
        answers: dict[TopicPartition, int] = {}
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for p in topic.results_by_partition:
                    answers[(topic.name, p.partition_index)] = p.partition_error_code
        return {tp: answers.get(tp, E.UNKNOWN_SERVER_ERROR) for tp in wanted}
