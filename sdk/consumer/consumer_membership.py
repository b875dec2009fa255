"""ConsumerMembershipManager: the consumer's membership in a KIP-848 consumer group.

``group_protocol="consumer"`` (Java's ``ConsumerMembershipManager`` and
``ConsumerHeartbeatRequestManager``, librdkafka's cgrp in its consumer mode). The broker computes
the assignment; the member only heartbeats (ConsumerGroupHeartbeat, API 68) and reconciles:

- The first heartbeat (member epoch 0), and any heartbeat after an error, carries the member's
  full state (instance id, rack, rebalance timeout, subscription, server assignor, owned
  partitions); the others carry only what changed since the last answered one (None otherwise).
- The answer gives the member epoch, the heartbeat interval and, when it changed, the target
  assignment (by topic id). Reconciling it: partitions no longer in the target are revoked first
  (auto-commit commits their positions, then ``on_partitions_revoked``), then the added ones are
  assigned (``on_partitions_assigned``), then the next heartbeat (sent at once) reports the owned
  partitions, which is the acknowledgement the broker waits for before it gives revoked
  partitions to another member.
- FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID: the partitions are lost (``on_partitions_lost``, no
  commit), and the member rejoins with epoch 0 and the same member id. UNRELEASED_INSTANCE_ID,
  FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, UNSUPPORTED_ASSIGNOR, INVALID_REQUEST and
  authorization errors are fatal: the next poll raises them. Coordinator errors re-find the
  coordinator.
- Leaving: a heartbeat with epoch -1 (a static member: -2, so the broker keeps its assignment
  for a restart within the session timeout). ``max_poll_interval_ms`` without a poll leaves the
  same way; the next poll rejoins.
- Offset commits carry the member epoch as ``generation_id_or_member_epoch``, and
  ``group_metadata()`` answers it as the generation, as Java's consumer does.

Listener calls run in ``ensure_active_group`` (the poll, and the background reconcile task), under
one lock, as the classic ``ConsumerCoordinator`` does. The network is reached through a
``CoordinatorPort`` and topic names through a ``TopicNames`` port, time through a ``Clock``: tests
drive the state machine with ``sdk.testing.mock_coordinator`` and ``sdk.testing.mock_time``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import enum
import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from sdk.client.backoff import ExponentialBackoff
from sdk.client.client import KafkaClient
from sdk.client.cluster import TopicPartition
from sdk.client.coordinators import (
    COORDINATOR_ERRORS,
    ClientCoordinatorPort,
    CoordinatorPort,
    CoordinatorType,
)
from sdk.consumer.errors import CommitFailedError, ConsumerStoppedError
from sdk.consumer.group_channel import LOAD_IN_PROGRESS, GroupChannel
from sdk.consumer.group_clock import SYSTEM_CLOCK, Clock
from sdk.consumer.group_observer import GroupObserver
from sdk.consumer.group_offsets import (
    auto_commit_loop,
    commit_errors,
    commit_request,
    fetch_committed,
    offset_commit_coordinator_error,
)
from sdk.consumer.listener import call_listener
from sdk.consumer.records import ConsumerGroupMetadata, OffsetAndMetadata
from sdk.consumer.subscription import SubscriptionState
from sdk.errors import ErrorCode, KafkaConnectionError, KafkaError, KafkaTimeoutError, make_error
from sdk.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    MetadataRequest,
    OffsetCommitRequest,
)

__all__ = [
    "LEAVE_EPOCH",
    "STATIC_LEAVE_EPOCH",
    "ClientTopicNames",
    "ConsumerMembershipManager",
    "MembershipState",
    "TopicNames",
]

log = logging.getLogger(__name__)

#: Member epoch of a heartbeat that leaves the group; a static member's temporary leave.
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
#: The member is gone (the broker forgot it or a newer epoch exists): partitions lost, rejoin.
_FENCED = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
#: Commit errors meaning the member's epoch is not (any more) the group's.
_COMMIT_MEMBERSHIP_ERRORS = frozenset(
    {
        ErrorCode.FENCED_MEMBER_EPOCH,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.STALE_MEMBER_EPOCH,
        ErrorCode.ILLEGAL_GENERATION,
    }
)
SERVER_ASSIGNORS = ("uniform", "range")


class MembershipState(enum.Enum):
    """Java's ``MemberState``, without its internal sub-steps."""

    UNSUBSCRIBED = "unsubscribed"
    JOINING = "joining"
    RECONCILING = "reconciling"
    STABLE = "stable"
    FENCED = "fenced"
    LEAVING = "leaving"
    FATAL = "fatal"


class TopicNames(Protocol):
    """Topic ids of an assignment to names (the broker assigns by id)."""

    async def names(self, topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
        """Names of those ids it can find (looked up when not known)."""
        ...

    def id_of(self, topic: str) -> uuid.UUID | None:
        """The id of a topic the metadata knows."""
        ...

    def track(self, topics: Iterable[str]) -> None:
        """Keep these topics in the metadata refreshes (assigned topics must be fetched)."""


class ClientTopicNames:
    """``TopicNames`` over a ``KafkaClient``'s metadata: an id it does not know is looked up with
    a Metadata request for every topic (a regex subscription's topics need not be tracked yet)."""

    def __init__(self, client: KafkaClient) -> None:
        self._client = client
        self._extra: dict[uuid.UUID, str] = {}

    def _known(self) -> dict[uuid.UUID, str]:
        cluster = self._client.cluster
        found = dict(self._extra)
        for name in self._client.topics:
            topic = cluster.topic(name)
            if topic is not None and topic.topic_id is not None:
                found[topic.topic_id] = name
        return found

    async def names(self, topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
        wanted = set(topic_ids)
        known = self._known()
        if not wanted <= known.keys():
            request = MetadataRequest(topics=None, allow_auto_topic_creation=False)
            response = await self._client.send_to_any(request)
            for t in response.topics:
                if t.name is not None and t.topic_id is not None and t.topic_id.int:
                    self._extra[t.topic_id] = t.name
            known = self._known()
        return {i: known[i] for i in wanted if i in known}

    def id_of(self, topic: str) -> uuid.UUID | None:
        found = self._client.cluster.topic(topic)
        if found is not None and found.topic_id is not None:
            return found.topic_id
        return next((i for i, name in self._extra.items() if name == topic), None)

    def track(self, topics: Iterable[str]) -> None:
        wanted = set(topics) - self._client.topics
        if wanted:
            self._client.set_topics(self._client.topics | wanted)


def new_member_id() -> str:
    """A member id as Java's consumer makes it (KIP-1082: the client picks it): a random UUID in
    URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class _SentState:
    """What the last answered heartbeat told the broker, so the next one sends only changes."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.full = True
        self.topics: tuple[str, ...] | None = None
        self.regex: str | None = None
        self.owned: frozenset[TopicPartition] | None = None


class ConsumerMembershipManager:
    """One consumer's KIP-848 group membership (see the module docstring)."""

    def __init__(
        self,
        port: CoordinatorPort,
        subscription: SubscriptionState,
        *,
        topic_names: TopicNames,
        clock: Clock = SYSTEM_CLOCK,
        retry_backoff: ExponentialBackoff | None = None,
        request_timeout_ms: float = 30000,
        group_id: str,
        group_instance_id: str | None,
        rack_id: str | None = None,
        server_assignor: str | None = None,
        rebalance_timeout_ms: int,
        max_poll_interval_ms: int,
        retry_backoff_ms: int,
        enable_auto_commit: bool,
        auto_commit_interval_ms: int,
        member_id: str | None = None,
    ) -> None:
        self._clock = clock
        if retry_backoff is None:
            retry_backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_ms)
        self._retry_backoff = retry_backoff
        self._request_timeout_ms = request_timeout_ms
        self._subscription = subscription
        self._topic_names = topic_names
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.rack_id = rack_id
        self.server_assignor = server_assignor
        self.rebalance_timeout_ms = int(rebalance_timeout_ms)
        self.max_poll_interval_ms = int(max_poll_interval_ms)
        self.retry_backoff_ms = int(retry_backoff_ms)
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = int(auto_commit_interval_ms)
        self._channel = GroupChannel(
            port, group_id, retry_backoff=retry_backoff, request_timeout_ms=request_timeout_ms, clock=clock
        )
        self.member_id = member_id or new_member_id()
        self.member_epoch = 0
        self.state = MembershipState.UNSUBSCRIBED
        #: Milliseconds between heartbeats, as the broker said (until it says: the retry backoff).
        self.heartbeat_interval_ms = 5000
        self._sent = _SentState()
        #: The broker's target assignment by topic id (None: none received for this membership).
        self._target: dict[uuid.UUID, frozenset[int]] | None = None
        #: Bumped at every new target or membership loss: a reconciliation of an older one stops.
        self._target_version = 0
        self._lost_pending = False
        self._fatal: KafkaError | None = None
        self._closed = False
        self._join_lock = asyncio.Lock()
        self._heartbeat_now = asyncio.Event()
        #: Set while the member has an epoch from the broker (cleared when it must rejoin).
        self._joined = asyncio.Event()
        self._reconcile_wanted = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._last_poll = clock.monotonic()
        self._waits_for_poll = False
        self._last_committed: dict[TopicPartition, OffsetAndMetadata] = {}
        self._joined_metadata = ConsumerGroupMetadata(group_id, -1, "", group_instance_id)
        self._background_error: KafkaError | None = None
        #: Reconciliations completed (tests and metrics read it).
        self.rebalances = 0
        #: Told of commits and reconciliations (metrics, interceptors), when set.
        self.observer: GroupObserver | None = None

    @classmethod
    def for_client(
        cls, client: KafkaClient, subscription: SubscriptionState, *, group_id: str, **settings: Any
    ) -> ConsumerMembershipManager:
        """The membership over ``client``'s connections and metadata, on the system clock."""
        return cls(
            ClientCoordinatorPort(client, CoordinatorType.GROUP, group_id),
            subscription,
            topic_names=ClientTopicNames(client),
            retry_backoff=client.retry_backoff,
            request_timeout_ms=client.request_timeout_ms,
            group_id=group_id,
            **settings,
        )

    @property
    def channel(self) -> GroupChannel:
        return self._channel

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, *, join_in_background: bool = False) -> None:
        """Start the heartbeat task, the reconcile task (``join_in_background``: listener calls
        without waiting for a poll, as the classic membership's join task) and auto-commit."""
        loop = asyncio.get_running_loop()
        self._last_poll = self._clock.monotonic()
        if self._subscription.partitions_auto_assigned():
            self.state = MembershipState.JOINING
        self._tasks.append(loop.create_task(self._heartbeat_loop(), name=f"cg-heartbeat-{self.group_id}"))
        if join_in_background:
            self._tasks.append(loop.create_task(self._reconcile_loop(), name=f"cg-reconcile-{self.group_id}"))
        if self.enable_auto_commit:
            name = f"cg-autocommit-{self.group_id}"
            self._tasks.append(loop.create_task(self._auto_commit_loop(), name=name))

    async def close(self, *, leave: bool = True) -> None:
        """Commit (auto-commit), revoke the assignment through the listener, and leave: epoch -1,
        or -2 for a static member (the broker keeps its partitions for its restart)."""
        if self._closed:
            return
        self._closed = True
        self._joined.set()  # a poll waiting for the join ends (ConsumerStoppedError)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        member = self.member_epoch > 0 and self._fatal is None and not self._lost_pending
        if self.enable_auto_commit and (member or self._subscription.user_assigned):
            with contextlib.suppress(KafkaError):
                await self._commit_consumed(stop_when_closed=False)
        assigned = self._subscription.assigned_partitions()
        if assigned and self._subscription.partitions_auto_assigned():
            await self._call("on_partitions_revoked" if member else "on_partitions_lost", assigned)
            self._subscription.assign_from_subscribed([])
        if leave and self.member_epoch > 0 and self._fatal is None:
            await self._leave("the consumer is closing")

    # -- the consumer's calls -------------------------------------------------------------------

    def record_poll(self) -> None:
        self._last_poll = self._clock.monotonic()
        if self._waits_for_poll:
            self._waits_for_poll = False
            self._heartbeat_now.set()

    def wake_join(self) -> None:
        """The subscription changed: heartbeat with it now."""
        if self._subscription.partitions_auto_assigned() and self.state == MembershipState.UNSUBSCRIBED:
            self.state = MembershipState.JOINING
        self._heartbeat_now.set()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The member id and the last member epoch the broker gave (KIP-447 fencing with the
        epoch as the generation); kept after a fence until the rejoin's epoch arrives."""
        return self._joined_metadata

    async def maybe_leave_group(self, reason: str) -> None:
        """``unsubscribe``: leave the group (epoch -1; -2 for a static member)."""
        if self.member_epoch > 0:
            await self._leave(reason)
        self._reset_membership(new_state=MembershipState.UNSUBSCRIBED)

    def need_rejoin(self) -> bool:
        """Whether ``ensure_active_group`` has listener work to do."""
        if not self._subscription.partitions_auto_assigned():
            return False
        return self._lost_pending or self._target_differs()

    async def ensure_active_group(self, timeout_ms: float | None = None) -> bool:
        """Run the pending listener steps: partitions lost, or the reconciliation of the target
        assignment. Does not wait for the broker (the heartbeat task talks to it): True unless
        another task holds the reconciliation past ``timeout_ms``. A fatal heartbeat error is
        raised here."""
        self._raise_if_fatal()
        error, self._background_error = self._background_error, None
        if error is not None:
            raise error
        if self._closed:
            raise ConsumerStoppedError("the consumer is closed")
        if self._subscription.partitions_auto_assigned() and self.state == MembershipState.UNSUBSCRIBED:
            self.wake_join()
        if self._lost_pending:
            async with self._join_lock:
                await self._settle_lost()
        if self._subscription.partitions_auto_assigned() and not self._joined.is_set():
            # Joining: wait for the broker's first answer (it carries the assignment), as the
            # classic join does, so the poll after it has partitions.
            wait_s = self._request_timeout_ms / 1000 if timeout_ms is None else timeout_ms / 1000
            with contextlib.suppress(TimeoutError):
                await self._clock.wait_for(self._wait_joined(), wait_s)
            self._raise_if_fatal()
        if not self.need_rejoin():
            return True
        timeout = None if timeout_ms is None else timeout_ms / 1000
        try:
            await self._clock.wait_for(self._join_lock.acquire(), timeout)
        except TimeoutError:
            return False
        try:
            await self._settle_lost()
            await self._reconcile()
        finally:
            self._join_lock.release()
        self._raise_if_fatal()
        return True

    async def _wait_joined(self) -> None:
        """Until the member has an epoch, or the membership failed for good."""
        while not self._joined.is_set() and self._fatal is None and not self._closed:
            await self._joined.wait()
        if self._closed:
            raise ConsumerStoppedError("the consumer is closed")

    # -- offsets --------------------------------------------------------------------------------

    async def commit_offsets(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """OffsetCommit with the member id and epoch (epoch -1 and no member in assign mode).
        Refused for a stale epoch while the member has a newer one meanwhile: sent again with
        it (Java's CommitRequestManager does the same); otherwise ``CommitFailedError``."""
        if not offsets:
            return
        self._raise_if_fatal()
        while True:
            if self._subscription.partitions_auto_assigned():
                if self.member_epoch <= 0 or self._lost_pending:
                    raise CommitFailedError(
                        f"group {self.group_id!r}: the member is not in the group (epoch "
                        f"{self.member_epoch}): the partitions may belong to another member"
                    )
                epoch, member_id, instance_id = self.member_epoch, self.member_id, self.group_instance_id
            else:
                epoch, member_id, instance_id = -1, "", None
            request = commit_request(self.group_id, epoch, member_id, instance_id, offsets)
            sent_at = self._clock.monotonic()

            def build(version: int, request: OffsetCommitRequest = request) -> OffsetCommitRequest:
                return request

            response, _ = await self._channel.send_retrying(
                OffsetCommitRequest.API_KEY, build, offset_commit_coordinator_error
            )
            refused = commit_errors(response)
            if not refused:
                self._last_committed.update(offsets)
                if self.observer is not None:
                    self.observer.committed(offsets, (self._clock.monotonic() - sent_at) * 1000)
                return
            code = next(iter(refused.values()))
            if code in _COMMIT_MEMBERSHIP_ERRORS and self.member_epoch > 0 and self.member_epoch != epoch:
                continue  # the member moved to a newer epoch while this commit was under way
            names = ", ".join(f"{t.topic}-{t.partition}: {make_error(c).name}" for t, c in refused.items())
            if code in _COMMIT_MEMBERSHIP_ERRORS:
                raise CommitFailedError(
                    f"commit rejected by group {self.group_id!r} ({names}): member epoch {epoch} is not "
                    "the member's current one; the partitions may belong to another member"
                )
            raise make_error(code, f"OffsetCommit failed for {names}")

    async def fetch_committed_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets for ``partitions`` (None where nothing is committed)."""
        return await fetch_committed(
            self._channel,
            self.group_id,
            partitions,
            clock=self._clock,
            backoff=self._retry_backoff,
            timeout_ms=self._request_timeout_ms,
        )

    # -- heartbeat ------------------------------------------------------------------------------

    def _subscribed(self) -> bool:
        return self._subscription.partitions_auto_assigned() and not self._closed

    def _owned_by_id(self) -> dict[uuid.UUID, list[int]] | None:
        """The owned partitions by topic id (None while a topic id is not known yet)."""
        by_id: dict[uuid.UUID, list[int]] = {}
        for tp in sorted(self._subscription.assigned_partitions()):
            topic_id = self._topic_names.id_of(tp.topic)
            if topic_id is None:
                return None
            by_id.setdefault(topic_id, []).append(tp.partition)
        return by_id

    def build_heartbeat(self, version: int) -> ConsumerGroupHeartbeatRequest:
        """The next heartbeat: the full state after a (re)join or an error, otherwise only what
        changed since the last answered one."""
        sent = self._sent
        full = sent.full or self.member_epoch == 0
        pattern = self._subscription.pattern
        regex = pattern.pattern if pattern is not None else None
        topics = None if regex is not None else tuple(sorted(self._subscription.subscription))
        owned = frozenset(self._subscription.assigned_partitions())
        request = ConsumerGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch
        )
        if full or self.group_instance_id is not None:
            request.instance_id = self.group_instance_id
        if full:
            request.rack_id = self.rack_id
            request.rebalance_timeout_ms = self.rebalance_timeout_ms
            request.server_assignor = self.server_assignor
        if regex is not None:
            if version < 1:
                raise make_error(
                    ErrorCode.UNSUPPORTED_VERSION,
                    "a pattern subscription needs ConsumerGroupHeartbeat v1 (SubscribedTopicRegex); "
                    "the group coordinator offers only v0",
                )
            if full or sent.regex != regex:
                request.subscribed_topic_regex = regex
        elif full or sent.topics != topics:
            request.subscribed_topic_names = list(topics or ())
        if full or sent.owned != owned:
            by_id = self._owned_by_id()
            if by_id is not None:
                request.topic_partitions = [
                    ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=i, partitions=p)
                    for i, p in by_id.items()
                ]
        return request

    async def _heartbeat_loop(self) -> None:
        retry = False  # the last heartbeat failed: the next one goes out after the backoff alone
        while not self._closed:
            delay: float | None = 0.0 if retry else self.heartbeat_interval_ms / 1000
            retry = False
            # Java's order after a fence: the lost partitions are given up (listener) before the
            # member rejoins, so the rejoin's heartbeat owns nothing.
            waiting = self._waits_for_poll or self._lost_pending
            if self.state in (MembershipState.UNSUBSCRIBED, MembershipState.FATAL) or waiting:
                delay = None
            elif self.member_epoch == 0:
                delay = 0.0
            self._heartbeat_now.clear()
            if delay != 0.0:
                with contextlib.suppress(TimeoutError):
                    await self._clock.wait_for(self._heartbeat_now.wait(), delay)
            if self._closed:
                return
            if not self._subscribed() or self._fatal is not None:
                continue
            if self._waits_for_poll or self._lost_pending:
                continue
            if self.state == MembershipState.UNSUBSCRIBED:
                self.state = MembershipState.JOINING
            if self._poll_timed_out():
                await self._on_poll_timeout()
                continue
            try:
                await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                log.debug("group %s: heartbeat failed: %r", self.group_id, exc)
                self._sent.reset()
                if isinstance(exc, KafkaConnectionError | KafkaTimeoutError):
                    self._channel.forget()
                if exc.code == ErrorCode.UNSUPPORTED_VERSION:
                    exc = make_error(
                        ErrorCode.UNSUPPORTED_VERSION,
                        "the cluster does not support the consumer group protocol (KIP-848: "
                        f"ConsumerGroupHeartbeat): use group_protocol='classic' until it does ({exc})",
                    )
                if not exc.retriable:
                    self._set_fatal(exc)
                    continue
                await self._clock.sleep(self.retry_backoff_ms / 1000)
                retry = True
            except Exception:
                log.exception("group %s: heartbeat task error", self.group_id)
                self._sent.reset()
                await self._clock.sleep(self.retry_backoff_ms / 1000)
                retry = True

    async def _heartbeat(self) -> None:
        owned_now = frozenset(self._subscription.assigned_partitions())
        built: list[ConsumerGroupHeartbeatRequest] = []

        def build(version: int) -> ConsumerGroupHeartbeatRequest:
            request = self.build_heartbeat(version)
            built.append(request)
            return request

        epoch_sent = self.member_epoch
        sent = await self._channel.send(ConsumerGroupHeartbeatRequest.API_KEY, build)
        response = sent.response
        code = response.error_code
        if code:
            self._on_heartbeat_error(code, response.error_message, sent.node, epoch_sent)
            return
        request = built[-1]
        if request.subscribed_topic_names is not None:
            self._sent.topics = tuple(request.subscribed_topic_names)
        if request.subscribed_topic_regex is not None:
            self._sent.regex = request.subscribed_topic_regex
        if request.topic_partitions is not None:
            self._sent.owned = owned_now
        self._sent.full = False
        if response.member_id:
            self.member_id = response.member_id
        if response.heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = response.heartbeat_interval_ms
        if response.member_epoch != self.member_epoch:
            log.info("group %s: member %s epoch %d", self.group_id, self.member_id, response.member_epoch)
        self.member_epoch = response.member_epoch
        if self.member_epoch > 0:
            self._joined.set()
        self._joined_metadata = ConsumerGroupMetadata(
            self.group_id, self.member_epoch, self.member_id, self.group_instance_id
        )
        if response.assignment is not None:
            target = {t.topic_id: frozenset(t.partitions) for t in response.assignment.topic_partitions}
            if target != self._target:
                self._target = target
                self._target_version += 1
        if self.state == MembershipState.JOINING:
            self.state = MembershipState.RECONCILING
        if self._target_differs() or self._lost_pending:
            self.state = MembershipState.RECONCILING
            self._reconcile_wanted.set()
        elif self.state == MembershipState.RECONCILING:
            self.state = MembershipState.STABLE

    def _on_heartbeat_error(self, code: int, message: str | None, node: int, epoch_sent: int) -> None:
        name = make_error(code).name
        detail = f"ConsumerGroupHeartbeat answered {name}" + (f": {message}" if message else "")
        self._sent.reset()
        if code in COORDINATOR_ERRORS:
            self._channel.forget(node)
            raise make_error(code, detail)
        if code == LOAD_IN_PROGRESS:
            raise make_error(code, detail)
        if code in _FENCED:
            if epoch_sent != self.member_epoch:
                return  # answered for an epoch we already left behind
            log.info(
                "group %s: member %s fenced (%s): partitions lost, rejoining",
                self.group_id,
                self.member_id,
                detail,
            )
            self._reset_membership(new_state=MembershipState.JOINING)
            self._heartbeat_now.set()
            return
        if code == ErrorCode.UNRELEASED_INSTANCE_ID:
            detail += (
                f" (another member with group_instance_id {self.group_instance_id!r} is in the group; "
                "it must leave or time out first)"
            )
        elif code == ErrorCode.GROUP_MAX_SIZE_REACHED:
            detail += f" (group {self.group_id!r} is full: group.consumer.max.size)"
        elif code == ErrorCode.UNSUPPORTED_ASSIGNOR:
            detail += f" (group_remote_assignor={self.server_assignor!r} is not one the broker has)"
        self._set_fatal(make_error(code, detail))

    def _set_fatal(self, error: KafkaError) -> None:
        if self._fatal is None:
            log.error("group %s: %s", self.group_id, error)
            self._fatal = error
        self.state = MembershipState.FATAL
        self._reconcile_wanted.set()
        self._joined.set()  # wakes the waiting polls, which raise it

    def _raise_if_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    def _reset_membership(self, *, new_state: MembershipState) -> None:
        """Epoch 0, no target; the partitions held are lost (the next ``ensure_active_group``
        tells the listener)."""
        self.member_epoch = 0
        self._joined.clear()
        self._target = None
        self._target_version += 1
        self._sent.reset()
        self.state = new_state
        assigned = self._subscription.assigned_partitions()
        if assigned and self._subscription.partitions_auto_assigned():
            self._lost_pending = True
            self._subscription.mark_for_revocation(assigned)
            self._reconcile_wanted.set()

    async def _leave(self, reason: str) -> None:
        """One heartbeat with the leave epoch; best effort (the session timeout removes the member
        anyway)."""
        epoch = STATIC_LEAVE_EPOCH if self.group_instance_id is not None else LEAVE_EPOCH
        self.state = MembershipState.LEAVING

        def build(version: int) -> ConsumerGroupHeartbeatRequest:
            return ConsumerGroupHeartbeatRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=epoch,
                instance_id=self.group_instance_id,
            )

        try:
            response = (await self._channel.send(ConsumerGroupHeartbeatRequest.API_KEY, build)).response
            if response.error_code:
                log.info("group %s: leave answered %s", self.group_id, make_error(response.error_code).name)
            else:
                log.info("group %s: member %s left (%s)", self.group_id, self.member_id, reason)
        except (KafkaError, ValueError) as exc:
            log.info("group %s: leave failed: %r", self.group_id, exc)
        self.member_epoch = 0
        self._joined.clear()
        self._sent.reset()
        self.state = MembershipState.UNSUBSCRIBED

    def _poll_timed_out(self) -> bool:
        if self.member_epoch <= 0 or self._join_lock.locked():
            return False
        return (self._clock.monotonic() - self._last_poll) * 1000 > self.max_poll_interval_ms

    async def _on_poll_timeout(self) -> None:
        log.warning(
            "group %s: no poll for more than max_poll_interval_ms=%d: leaving the group; the next poll "
            "rejoins",
            self.group_id,
            self.max_poll_interval_ms,
        )
        self._waits_for_poll = True
        await self._leave("max_poll_interval_ms expired")
        self._reset_membership(new_state=MembershipState.JOINING)

    # -- reconciliation -------------------------------------------------------------------------

    async def _target_partitions(self) -> set[TopicPartition] | None:
        """The target assignment by name (None: no target yet). Topics whose name is not known yet
        are left out (reconciled again once they are)."""
        if self._target is None:
            return None
        names = await self._topic_names.names(self._target.keys()) if self._target else {}
        return {TopicPartition(names[i], p) for i, parts in self._target.items() if i in names for p in parts}

    def _target_differs(self) -> bool:
        if self._target is None:
            return False
        owned: dict[uuid.UUID | None, set[int]] = {}
        for tp in self._subscription.assigned_partitions():
            owned.setdefault(self._topic_names.id_of(tp.topic), set()).add(tp.partition)
        target = {i: set(p) for i, p in self._target.items() if p}
        return owned != target

    async def _settle_lost(self) -> None:
        if not self._lost_pending:
            return
        self._lost_pending = False
        lost = self._subscription.assigned_partitions()
        if lost:
            log.info("group %s: partitions lost: %s", self.group_id, sorted(lost))
            await self._call("on_partitions_lost", lost)
            self._subscription.assign_from_subscribed([])
        self._heartbeat_now.set()

    async def _reconcile(self) -> None:
        """Move the owned partitions to the target: revoke (commit, listener), then assign
        (listener), then heartbeat at once to acknowledge."""
        version = self._target_version
        target = await self._target_partitions()
        if target is None or not self._subscription.partitions_auto_assigned():
            return
        self._topic_names.track({tp.topic for tp in target})
        owned = self._subscription.assigned_partitions()
        revoked = owned - target
        added = target - owned
        if not revoked and not added:
            return
        if self.observer is not None:
            self.observer.rebalance_started()
        log.info(
            "group %s: epoch %d reconciling to %s (revoking %s)",
            self.group_id,
            self.member_epoch,
            sorted(target),
            sorted(revoked),
        )
        if revoked:
            self._subscription.mark_for_revocation(revoked)
            if self.enable_auto_commit:
                await self._commit_before_revoke(revoked)
            await self._call("on_partitions_revoked", revoked)
            if version != self._target_version:
                return  # fenced or a newer target meanwhile: the next round starts from here
            self._subscription.assign_from_subscribed(owned - revoked)
        if version != self._target_version:
            return
        self._subscription.assign_from_subscribed((owned - revoked) | added)
        await self._call("on_partitions_assigned", added)
        self.rebalances += 1
        if self.observer is not None:
            self.observer.rebalance_completed()
        if version == self._target_version and not self._target_differs():
            self.state = MembershipState.STABLE
        self._heartbeat_now.set()

    async def _commit_before_revoke(self, revoked: set[TopicPartition]) -> None:
        offsets = {tp: o for tp, o in self._subscription.all_consumed_offsets().items() if tp in revoked}
        if not offsets:
            return
        try:
            await self.commit_offsets(offsets)
        except KafkaError as exc:
            log.warning("group %s: commit before revoking %s failed: %r", self.group_id, sorted(offsets), exc)

    async def _call(self, hook: str, partitions: Iterable[TopicPartition]) -> None:
        listener = self._subscription.listener
        if listener is None:
            return
        try:
            await call_listener(listener, hook, set(partitions))
        except Exception:
            log.exception("group %s: rebalance listener %s failed", self.group_id, hook)

    async def _reconcile_loop(self) -> None:
        """The background reconcile task: listener steps as soon as the heartbeat brings them."""
        while not self._closed:
            self._reconcile_wanted.clear()
            if self._fatal is None and self.need_rejoin():
                try:
                    await self.ensure_active_group()
                except asyncio.CancelledError:
                    raise
                except ConsumerStoppedError:
                    return
                except KafkaError as exc:
                    if exc is not self._fatal:
                        log.warning("group %s: background reconciliation failed: %r", self.group_id, exc)
                        self._background_error = exc
                except Exception:
                    log.exception("group %s: reconcile task error", self.group_id)
            with contextlib.suppress(TimeoutError):
                await self._clock.wait_for(self._reconcile_wanted.wait(), 1.0)

    # -- auto-commit ----------------------------------------------------------------------------

    async def _auto_commit_loop(self) -> None:
        await auto_commit_loop(
            self.group_id,
            self.auto_commit_interval_ms,
            self._clock,
            lambda: self._closed,
            lambda: self._commit_consumed(stop_when_closed=True),
        )

    async def _commit_consumed(self, *, stop_when_closed: bool) -> None:
        subscription = self._subscription
        if subscription.partitions_auto_assigned():
            if self.member_epoch <= 0 or self._lost_pending or (stop_when_closed and self._closed):
                return
        elif not subscription.user_assigned:
            return
        offsets: Mapping[TopicPartition, OffsetAndMetadata] = {
            tp: o
            for tp, o in subscription.all_consumed_offsets().items()
            if self._last_committed.get(tp) != o and not getattr(subscription.get_state(tp), "revoking", True)
        }
        if offsets:
            await self.commit_offsets(dict(offsets))
