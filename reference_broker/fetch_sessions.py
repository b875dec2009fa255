"""Incremental fetch sessions (KIP-227), following Kafka's ``FetchManager``/``FetchSession``.

A session remembers the partitions a consumer fetches, so later requests list only partitions
whose fetch position changed (plus ``forgotten_topics_data``), and responses carry only
partitions with something new: records, an error, or a changed high watermark, last stable
offset or log start offset. Clients that never open one (librdkafka, aiokafka) are unaffected.

Epoch rules: 0 opens a new session (dropping the named one), -1 is a sessionless full fetch
(dropping the named one), anything else must name a live session and equal its next epoch.
When all ``max.incremental.fetch.session.cache.slots`` are taken, the least recently used
session is evicted; with 0 slots no session is ever created (response session id 0), which
clients handle by staying on full requests.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections import OrderedDict

from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import FetchRequest

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
TOPIC_IDS_FROM = 13  # Fetch v13+ names topics by id, so sessions are keyed by id

PartitionKey = tuple[str | uuid.UUID, int]


@dataclasses.dataclass
class SessionPartition:
    """One partition as the session knows it: the client's position and what we last reported."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    sent_high_watermark: int = -1
    sent_last_stable_offset: int = -1
    sent_log_start_offset: int = -1

    def must_report(self, error_code: int, size: int, hw: int, lso: int, log_start: int) -> bool:
        """Kafka's ``maybeUpdateResponseData``: include when anything changed, and remember it."""
        changed = (
            error_code != ErrorCode.NONE
            or size > 0
            or hw != self.sent_high_watermark
            or lso != self.sent_last_stable_offset
            or log_start != self.sent_log_start_offset
        )
        self.sent_high_watermark, self.sent_last_stable_offset = hw, lso
        self.sent_log_start_offset = log_start
        return changed


@dataclasses.dataclass
class FetchSession:
    session_id: int
    uses_topic_ids: bool
    next_epoch: int = 1
    partitions: OrderedDict[PartitionKey, SessionPartition] = dataclasses.field(default_factory=OrderedDict)


@dataclasses.dataclass
class FetchPlan:
    """What one Fetch request reads and how its response is shaped."""

    partitions: list[SessionPartition]
    response_session_id: int = NO_SESSION
    incremental: bool = False
    session: FetchSession | None = None
    error_code: int = 0


def _key(uses_ids: bool, topic: str, topic_id: uuid.UUID, partition: int) -> PartitionKey:
    return (topic_id if uses_ids else topic, partition)


def _requested(request: FetchRequest, uses_ids: bool) -> list[tuple[PartitionKey, SessionPartition]]:
    return [
        (
            _key(uses_ids, t.topic, t.topic_id, p.partition),
            SessionPartition(
                t.topic,
                t.topic_id,
                p.partition,
                p.fetch_offset,
                p.partition_max_bytes,
                p.current_leader_epoch,
            ),
        )
        for t in request.topics
        for p in t.partitions
    ]


class FetchSessionCache:
    """All live sessions of one broker, evicting the least recently used when full."""

    def __init__(self, max_slots: int):
        self.max_slots = max_slots
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def plan(self, request: FetchRequest, version: int) -> FetchPlan:
        uses_ids = version >= TOPIC_IDS_FROM
        if version < 7:
            return FetchPlan([p for _, p in _requested(request, uses_ids)])
        epoch = request.session_epoch
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            self._sessions.pop(request.session_id, None)
            requested = _requested(request, uses_ids)
            plan = FetchPlan([p for _, p in requested])
            if epoch == INITIAL_EPOCH:
                session = self._create(uses_ids)
                if session is not None:
                    session.partitions.update(requested)
                    plan.session, plan.response_session_id = session, session.session_id
            return plan
        session = self._sessions.get(request.session_id)
        if session is None:
            return FetchPlan([], error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if epoch != session.next_epoch:
            return FetchPlan([], error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_ids:
            return FetchPlan([], error_code=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        self._sessions.move_to_end(session.session_id)
        session.next_epoch = 1 if epoch >= 2**31 - 1 else epoch + 1
        for key, update in _requested(request, uses_ids):
            known = session.partitions.get(key)
            if known is None:
                session.partitions[key] = update
            else:
                known.fetch_offset = update.fetch_offset
                known.partition_max_bytes = update.partition_max_bytes
                known.current_leader_epoch = update.current_leader_epoch
        for forgotten in request.forgotten_topics_data:
            for partition in forgotten.partitions:
                session.partitions.pop(_key(uses_ids, forgotten.topic, forgotten.topic_id, partition), None)
        return FetchPlan(list(session.partitions.values()), session.session_id, True, session)

    def forget(self, session_id: int) -> None:
        """Drop a session (one opened by a request that was then not answered with data)."""
        self._sessions.pop(session_id, None)

    def _create(self, uses_ids: bool) -> FetchSession | None:
        if self.max_slots <= 0:
            return None
        while len(self._sessions) >= self.max_slots:
            self._sessions.popitem(last=False)
        session_id = NO_SESSION
        while session_id == NO_SESSION or session_id in self._sessions:
            session_id = random.randint(1, 2**31 - 1)
        session = FetchSession(session_id, uses_ids)
        self._sessions[session_id] = session
        return session
