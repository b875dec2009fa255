"""Transaction markers in a cluster (Kafka's ``TransactionMarkerChannelManager``).

The coordinator ends a transaction partition by partition (``write_marker``); each partition gets
its marker from its leader, written in the background: through a WriteTxnMarkers request to a
partition led by another node, in-process (``write_local``) for one this node leads. Either way it
counts as written only once the partition's ISR holds it (Kafka appends markers with acks=-1): a
marker appended by a leader that then loses its leadership is gone, and a coordinator that had
taken it as written would complete a transaction the partition never ends. Until then ``write``
raises (the coordinator keeps the partition pending, so the transaction stays prepared and its
producer waits with CONCURRENT_TRANSACTIONS); once written, the next ``write`` for the same marker
returns at once and the coordinator completes the transaction (``retry_markers`` asks it to at
once, not at its next periodic retry). A failed write (the leader moved or died, the ISR did not
take it in time) is retried after ``RETRY_BACKOFF_S`` against the leader then.

The requests go over connections of their own (``channels``), as Kafka's marker channel has its
own network client: a marker waits on the leader until this node's replica fetcher has fetched
it, and a node serves one connection's requests in order, so on the replica fetcher's connection
the marker would hold up the very fetch it waits for.

A marker is known by its partition, result, producer id and epoch and the coordinator epoch: a
coordinator that loses and regains the ``__transaction_state`` partition does so in a newer
epoch, so what a write of its previous term left behind is never taken for a later transaction's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.errors import KafkaError, NotLeaderOrFollowerError, TransactionCoordinatorFencedError

log = logging.getLogger("reference_broker.txn_coordinator")

RETRY_BACKOFF_S = 0.2
#: a partition's answer that ends its marker. Every other answer is retried, UNKNOWN_TOPIC_OR_PARTITION
#: too (a restarted leader may not know the partition yet): as in Kafka, only the coordinator's own
#: metadata decides that a partition is gone (``known_partition``), and then its marker is skipped.
_DONE = frozenset({E.NONE})
#: answers that end the whole transaction's markers here: a newer coordinator (or producer epoch)
#: owns it (Kafka's TransactionMarkerRequestCompletionHandler cancels the rest and completes nothing)
_CANCELLED = frozenset({E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED})

MarkerKey = tuple[tuple[str, int], bool, int, int, int]


class MarkerInFlightError(NotLeaderOrFollowerError):
    """The partition's leader has not written the marker yet, or its ISR does not hold it yet."""


class MarkersCancelledError(TransactionCoordinatorFencedError):
    """The partition's leader fenced the marker: a newer coordinator owns the transaction."""


class RemoteMarkers:
    """The markers this coordinator has asked other nodes to write, by (partition, commit,
    producer id, producer epoch): in flight, or written and not yet taken by the coordinator."""

    def __init__(
        self,
        *,
        leader_of: Callable[[str, int], int | None],
        known_partition: Callable[[str, int], bool],
        is_local_leader: Callable[[str, int], bool],
        channels: Any,
        address_of: Callable[[int], tuple[str, int] | None],
        write_local: Callable[[tuple[str, int], bool, int, int, int], Awaitable[None]],
        retry_markers: Callable[[int], None],
    ) -> None:
        self.leader_of = leader_of
        #: whether this node's metadata still has the partition (a deleted topic's has no marker
        #: to write: Kafka's marker channel skips it and completes the transaction without it)
        self.known_partition = known_partition
        self.is_local_leader = is_local_leader
        #: a ``PeerChannels`` of the markers' own (see the module docstring)
        self.channels = channels
        self.address_of = address_of
        self.write_local = write_local
        self.retry_markers = retry_markers
        self._written: set[MarkerKey] = set()
        self._cancelled: set[MarkerKey] = set()
        self._in_flight: dict[MarkerKey, asyncio.Task[None]] = {}

    def write(self, tp: tuple[str, int], commit: bool, producer_id: int, producer_epoch: int,
              coordinator_epoch: int) -> None:
        """Returns once the partition's ISR holds this marker; raises MarkerInFlightError until
        then, MarkersCancelledError once the leader fenced it."""
        key: MarkerKey = (tp, commit, producer_id, producer_epoch, coordinator_epoch)
        if key in self._written:
            self._written.discard(key)
            return
        if key in self._cancelled:
            self._cancelled.discard(key)
            raise MarkersCancelledError(f"{tp[0]}-{tp[1]}: the leader fenced the marker of producer"
                                        f" {producer_id} (coordinator epoch {coordinator_epoch})")
        if key not in self._in_flight:
            self._in_flight[key] = asyncio.get_running_loop().create_task(
                self._write(key), name=f"txn marker {tp[0]}-{tp[1]}")
        raise MarkerInFlightError(f"{tp[0]}-{tp[1]}: the marker is not in the partition's ISR yet")

    async def _write(self, key: MarkerKey) -> None:
        """Write the marker; retry after a back-off (the key stays in flight meanwhile, so the
        coordinator's own retries do not start another write)."""
        tp, _commit, producer_id, _epoch, _coordinator_epoch = key
        try:
            code = await self._deliver(key)
            if code in _CANCELLED:
                log.info("marker for producer %d on %s-%d refused: %s (a newer coordinator owns the"
                         " transaction)", producer_id, *tp, E(code).name)
            done = code in _DONE or code in _CANCELLED
            if not done:
                log.info("marker for producer %d on %s-%d: %s, retrying", producer_id, *tp, E(code).name)
                await asyncio.sleep(RETRY_BACKOFF_S)
        finally:
            self._in_flight.pop(key, None)
        if done:
            (self._cancelled if code in _CANCELLED else self._written).add(key)
        self.retry_markers(producer_id)

    async def _deliver(self, key: MarkerKey) -> int:
        """One write of the marker by the partition's leader: its error code."""
        from sdk.protocol.messages import WriteTxnMarkersRequest as R

        (topic, partition), commit, producer_id, producer_epoch, coordinator_epoch = key
        try:
            if not self.known_partition(topic, partition):
                log.info("marker for producer %d on %s-%d skipped: the partition is no longer in the"
                         " metadata (its topic was deleted)", producer_id, topic, partition)
                return E.NONE
            if self.is_local_leader(topic, partition):
                await self.write_local((topic, partition), commit, producer_id, producer_epoch,
                                       coordinator_epoch)
                return E.NONE
            leader = self.leader_of(topic, partition)
            address = self.address_of(leader) if leader is not None else None
            if leader is None or address is None:
                return E.NOT_LEADER_OR_FOLLOWER
            self.channels.update(leader, *address)
            request = R(markers=[R.WritableTxnMarker(
                producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
                topics=[R.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
                coordinator_epoch=coordinator_epoch)])
            response = await self.channels.send(leader, request)
            return int(response.markers[0].topics[0].partitions[0].error_code)
        except KafkaError as exc:
            return int(exc.code)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("marker for producer %d on %s-%d: %s", producer_id, topic, partition, exc)
            return E.NOT_LEADER_OR_FOLLOWER

    async def stop(self) -> None:
        for task in list(self._in_flight.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._in_flight.clear()
        await self.channels.close()
