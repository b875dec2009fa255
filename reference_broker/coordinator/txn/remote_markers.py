"""Transaction markers for partitions led by other nodes (cluster mode; Kafka's
``TransactionMarkerChannelManager``).

The coordinator ends a transaction partition by partition (``write_marker``); a partition this
node does not lead gets its marker from its leader, through a WriteTxnMarkers request sent in the
background. Until the leader has written it, ``write`` raises (the coordinator keeps the partition
pending, so the transaction stays prepared and its producer waits with CONCURRENT_TRANSACTIONS);
once written, the next ``write`` for the same marker returns at once and the coordinator completes
the transaction (``retry_markers`` asks it to at once, not at its next periodic retry). A failed
send (the leader moved or died) is retried after ``RETRY_BACKOFF_S`` against the leader then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.errors import NotLeaderOrFollowerError

log = logging.getLogger("reference_broker.txn_coordinator")

RETRY_BACKOFF_S = 0.2
#: a partition's answers that end its marker: written, or not needed any more
_DONE = frozenset(
    {E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED}
)

MarkerKey = tuple[tuple[str, int], bool, int, int]


class MarkerInFlightError(NotLeaderOrFollowerError):
    """The partition's leader is another node, which has not written the marker yet."""


class RemoteMarkers:
    """The markers this coordinator has asked other nodes to write, by (partition, commit,
    producer id, producer epoch): in flight, or written and not yet taken by the coordinator."""

    def __init__(
        self,
        *,
        leader_of: Callable[[str, int], int | None],
        is_local_leader: Callable[[str, int], bool],
        send: Callable[[int, Any], Any],
        retry_markers: Callable[[int], None],
    ) -> None:
        self.leader_of = leader_of
        self.is_local_leader = is_local_leader
        self.send = send
        self.retry_markers = retry_markers
        self._written: set[MarkerKey] = set()
        self._in_flight: dict[MarkerKey, asyncio.Task[None]] = {}

    def led_elsewhere(self, tp: tuple[str, int]) -> bool:
        return not self.is_local_leader(*tp)

    def write(self, tp: tuple[str, int], commit: bool, producer_id: int, producer_epoch: int,
              coordinator_epoch: int) -> None:
        """Returns once the leader wrote this marker; raises MarkerInFlightError until then."""
        key: MarkerKey = (tp, commit, producer_id, producer_epoch)
        if key in self._written:
            self._written.discard(key)
            return
        if key not in self._in_flight:
            self._in_flight[key] = asyncio.get_running_loop().create_task(
                self._send(key, coordinator_epoch), name=f"txn marker {tp[0]}-{tp[1]}")
        raise MarkerInFlightError(f"{tp[0]}-{tp[1]}: the marker is being written by its leader")

    async def _send(self, key: MarkerKey, coordinator_epoch: int) -> None:
        from sdk.protocol.messages import WriteTxnMarkersRequest as R

        (topic, partition), commit, producer_id, producer_epoch = key
        code: int = E.NOT_LEADER_OR_FOLLOWER
        try:
            leader = self.leader_of(topic, partition)
            if leader is not None:
                request = R(markers=[R.WritableTxnMarker(
                    producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
                    topics=[R.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
                    coordinator_epoch=coordinator_epoch)])
                response = await self.send(leader, request)
                code = response.markers[0].topics[0].partitions[0].error_code
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("marker for producer %d on %s-%d: %s", producer_id, topic, partition, exc)
        finally:
            self._in_flight.pop(key, None)
        if code == E.TRANSACTION_COORDINATOR_FENCED:
            log.warning("marker for producer %d on %s-%d refused: TRANSACTION_COORDINATOR_FENCED"
                        " (a newer coordinator ended the transaction)", producer_id, topic, partition)
        if code in _DONE:
            self._written.add(key)
            self.retry_markers(producer_id)
            return
        log.info("marker for producer %d on %s-%d: %s, retrying", producer_id, topic, partition,
                 E(code).name)
        await asyncio.sleep(RETRY_BACKOFF_S)
        self.retry_markers(producer_id)

    async def stop(self) -> None:
        for task in list(self._in_flight.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._in_flight.clear()
