"""ConsumerCoordinator: the consumer's membership in a group (Kafka's classic rebalance protocol).

The member finds its coordinator (FindCoordinator), joins (JoinGroup, repeated with the id the
broker hands out on MEMBER_ID_REQUIRED), and syncs (SyncGroup); the member the broker elects
leader runs the chosen assignor over every member's subscription first. The assignment then
replaces the SubscriptionState's, with the listener called in Kafka's order (see
``sdk.consumer.listener``). Between rebalances a background task heartbeats and enforces
``max_poll_interval_ms`` by leaving the group; another commits consumed offsets every
``auto_commit_interval_ms``.

Every rebalance step that involves the application (listener calls, giving up partitions) runs in
``ensure_active_group``, under one lock, so a listener sees a consistent assignment. Who calls it:
the consumer's poll, and, when ``start(join_in_background=True)`` (what ``sdk.Consumer`` does, as
aiokafka), a join task that runs it as soon as a rebalance is needed (a subscription change, a
heartbeat answered REBALANCE_IN_PROGRESS, a lost membership, the leader seeing new partitions),
so the member joins without waiting for the application to poll, and a poll that comes meanwhile
waits for that join to end. After leaving on ``max_poll_interval_ms`` the join task waits for the
next poll, as Java's and aiokafka's consumers do. The heartbeat and auto-commit tasks only record
what happened (a rebalance started, the membership was lost, the member was fenced) and stop
fetching partitions that may no longer be ours.

Versions sent (the highest both sides support, capped as below): FindCoordinator up to v6 (v4+
batched), JoinGroup up to v9, SyncGroup up to v5, Heartbeat up to v4, LeaveGroup up to v5,
OffsetCommit up to v9 and OffsetFetch up to v9 (v10 names topics by id); the newest non-flexible
ones (JoinGroup v5, SyncGroup v3, Heartbeat v3, LeaveGroup v2) to a broker that keeps losing the
flexible ones. Talking to the coordinator is ``group_channel``; the offset requests are
``group_offsets``; the leader's assignment is ``group_leader``; the rebalance decisions that need
no broker are ``group_rebalance``.

The network is reached only through a ``CoordinatorPort`` and time only through a ``Clock``, both
injected: ``ConsumerCoordinator.for_client`` wires the real ones, and tests drive every state
transition with ``sdk.testing.mock_coordinator`` and ``sdk.testing.mock_time`` instead (Java's
``MockClient`` and ``MockTime``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from sdk.client.backoff import ExponentialBackoff
from sdk.client.client import KafkaClient
from sdk.client.cluster import TopicPartition
from sdk.client.coordinators import (
    COORDINATOR_ERRORS,
    ClientCoordinatorPort,
    CoordinatorPort,
    CoordinatorType,
)
from sdk.consumer.assignors import (
    Assignment,
    ConsumerPartitionAssignor,
    RebalanceProtocol,
    Subscription,
    decode_assignment,
    encode_subscription,
)
from sdk.consumer.errors import CommitFailedError, ConsumerStoppedError
from sdk.consumer.group_channel import LOAD_IN_PROGRESS, GroupChannel
from sdk.consumer.group_clock import SYSTEM_CLOCK, Clock
from sdk.consumer.group_leader import (
    ClientTopics,
    TopicMetadata,
    assign,
    choose_assignor,
    decode_members,
    partition_counts,
)
from sdk.consumer.group_observer import GroupObserver
from sdk.consumer.group_offsets import (
    auto_commit_loop,
    commit_errors,
    commit_request,
    fetch_committed,
    offset_commit_coordinator_error,
)
from sdk.consumer.group_rebalance import assignment_change, rebalance_protocol
from sdk.consumer.listener import call_listener
from sdk.consumer.records import ConsumerGroupMetadata, OffsetAndMetadata
from sdk.consumer.subscription import SubscriptionState
from sdk.errors import (
    ErrorCode,
    FencedInstanceIdError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    make_error,
)
from sdk.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)

__all__ = ["ConsumerCoordinator", "MemberState"]

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
_GENERATION_LOST = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION})


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    REBALANCING = "rebalancing"
    STABLE = "stable"


class _Retry(Exception):
    """Internal: this join attempt is over; try again (after the backoff when ``backoff``)."""

    def __init__(self, reason: str, backoff: bool = True) -> None:
        super().__init__(reason)
        self.backoff = backoff


class ConsumerCoordinator:
    """One consumer's group membership (see the module docstring and the consumer contract).

    ``port`` reaches the group's coordinator, ``topics`` the client's metadata, ``clock`` time;
    ``retry_backoff`` paces retries (default: a constant ``retry_backoff_ms``) and
    ``request_timeout_ms`` bounds the requests the coordinator answers at once."""

    def __init__(
        self,
        port: CoordinatorPort,
        subscription: SubscriptionState,
        *,
        topics: TopicMetadata,
        clock: Clock = SYSTEM_CLOCK,
        retry_backoff: ExponentialBackoff | None = None,
        request_timeout_ms: float = 30000,
        group_id: str,
        group_instance_id: str | None,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        rebalance_timeout_ms: int,
        max_poll_interval_ms: int,
        retry_backoff_ms: int,
        enable_auto_commit: bool,
        auto_commit_interval_ms: int,
        assignors: Sequence[ConsumerPartitionAssignor],
        exclude_internal_topics: bool = True,
    ) -> None:
        self._topics = topics
        self._clock = clock
        if retry_backoff is None:
            retry_backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_ms)
        self._retry_backoff = retry_backoff
        self._request_timeout_ms = request_timeout_ms
        self._subscription = subscription
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = int(session_timeout_ms)
        self.heartbeat_interval_ms = int(heartbeat_interval_ms)
        self.rebalance_timeout_ms = int(rebalance_timeout_ms)
        self.max_poll_interval_ms = int(max_poll_interval_ms)
        self.retry_backoff_ms = int(retry_backoff_ms)
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = int(auto_commit_interval_ms)
        self.assignors = list(assignors)
        self.exclude_internal_topics = exclude_internal_topics
        self.protocol = rebalance_protocol(self.assignors)
        self._channel = GroupChannel(
            port, group_id, retry_backoff=retry_backoff, request_timeout_ms=request_timeout_ms, clock=clock
        )
        self.member_id = ""
        self.generation = -1
        #: What ``group_metadata()`` answers: the generation and member id of the last completed
        #: join (Java's ConsumerCoordinator keeps it the same way). Losing or leaving the
        #: membership does not change it, so a transactional producer that sends offsets for an
        #: evicted member carries the old identity and the group coordinator refuses them.
        self._joined_metadata = ConsumerGroupMetadata(group_id, -1, "", group_instance_id)
        self.protocol_name: str | None = None
        self.leader_id = ""
        self.state = MemberState.UNJOINED
        self._rejoin_reason: str | None = "first join"
        self._needs_join_prepare = True
        self._lost_pending = False
        self._fatal: BaseException | None = None
        self._joined_topics: frozenset[str] | None = None
        #: Leader only: partition counts the last assignment was made with.
        self._assigned_counts: dict[str, int] = {}
        self._join_lock = asyncio.Lock()
        self._last_poll = clock.monotonic()
        self._last_committed: dict[TopicPartition, OffsetAndMetadata] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        #: Set to wake the background join task (a rebalance may be needed).
        self._join_wanted = asyncio.Event()
        #: The join task waits for a poll (it left the group on ``max_poll_interval_ms``).
        self._join_waits_for_poll = False
        #: A non-retriable error of a background join, raised by the next ``ensure_active_group``.
        self._background_join_error: KafkaError | None = None
        #: Rebalances completed (tests and metrics read it).
        self.rebalances = 0
        #: Told of commits and rebalances (the consumer's metrics and interceptors), if set.
        self.observer: GroupObserver | None = None

    @classmethod
    def for_client(
        cls, client: KafkaClient, subscription: SubscriptionState, *, group_id: str, **settings: Any
    ) -> ConsumerCoordinator:
        """The membership over ``client``: its connections, metadata, retry backoff and request
        timeout, and the system clock. ``settings``: the constructor's group settings."""
        return cls(
            ClientCoordinatorPort(client, CoordinatorType.GROUP, group_id),
            subscription,
            topics=ClientTopics(client),
            retry_backoff=client.retry_backoff,
            request_timeout_ms=client.request_timeout_ms,
            group_id=group_id,
            **settings,
        )

    @property
    def channel(self) -> GroupChannel:
        """The channel to the coordinator (its version fallback is visible to tests)."""
        return self._channel

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, *, join_in_background: bool = False) -> None:
        """Start the heartbeat task, with auto-commit the commit task, and with
        ``join_in_background`` the join task (see the module docstring); without it, joining
        waits for the first ``ensure_active_group``."""
        loop = asyncio.get_running_loop()
        self._last_poll = self._clock.monotonic()
        self._tasks.append(loop.create_task(self._heartbeat_loop(), name=f"heartbeat-{self.group_id}"))
        if join_in_background:
            self._tasks.append(loop.create_task(self._join_loop(), name=f"join-{self.group_id}"))
        if self.enable_auto_commit:
            self._tasks.append(loop.create_task(self._auto_commit_loop(), name=f"autocommit-{self.group_id}"))

    async def close(self, *, leave: bool = True) -> None:
        """Commit consumed offsets (with auto-commit), revoke the assignment through the listener,
        and leave the group unless this is a static member (which keeps its partitions for a
        restart within ``session_timeout_ms``, as Kafka's Java client does) or ``leave`` is False."""
        if self._closed:
            return
        # Not under the join lock: a JoinGroup may be held for the whole rebalance timeout, and
        # LeaveGroup is what ends it.
        self._closed = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        member = self.state == MemberState.STABLE and self.generation >= 0 and self._fatal is None
        if self.enable_auto_commit and (member or self._subscription.user_assigned):
            with contextlib.suppress(KafkaError):
                await self._commit_consumed(stop_when_closed=False)
        assigned = self._subscription.assigned_partitions()
        if assigned and self._subscription.partitions_auto_assigned():
            # As Java's onLeavePrepare: revoked while the membership is valid, lost otherwise.
            await self._call("on_partitions_revoked" if member else "on_partitions_lost", assigned)
            self._subscription.assign_from_subscribed([])
        if leave and self.group_instance_id is None and self.member_id and self._fatal is None:
            await self._leave_group("the consumer is closing")

    # -- public API -----------------------------------------------------------------------------

    def record_poll(self) -> None:
        """The application polled: restart the ``max_poll_interval_ms`` clock."""
        self._last_poll = self._clock.monotonic()
        if self._join_waits_for_poll:
            self._join_waits_for_poll = False
            self._join_wanted.set()

    def wake_join(self) -> None:
        """Have the background join task look at once whether a rebalance is needed (the
        subscription changed)."""
        self._join_wanted.set()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The identity for ``send_offsets_to_transaction`` (KIP-447): the generation and member id
        of the last completed join, kept after an eviction, a ``max_poll_interval_ms`` expiry or a
        leave until the next join completes; generation -1 and member id "" before the first.

        Never the reset generation -1 of a lost membership: the coordinator accepts transactional
        offsets that name no generation and no member (the form from before KIP-447), which would
        let a member the group already dropped commit offsets of partitions another member owns."""
        return self._joined_metadata

    async def maybe_leave_group(self, reason: str) -> None:
        """Leave the group now (``Consumer.unsubscribe``): LeaveGroup for a dynamic member; a
        static member only forgets its generation, as in Kafka's Java client, and is removed by
        its session timeout. A later ``subscribe`` joins afresh."""
        if self.group_instance_id is None and self.member_id:
            await self._leave_group(reason)
        self.member_id, self.generation, self.state = "", -1, MemberState.UNJOINED
        self._joined_topics = None
        self._needs_join_prepare = True
        self.request_rejoin(reason)

    def request_rejoin(self, reason: str) -> None:
        """Rejoin at the next ``ensure_active_group`` (e.g. after a subscription change)."""
        if self._rejoin_reason is None:
            log.info(
                "group %s: rejoin requested: %s",
                self.group_id,
                reason,
                extra={**self._log_fields(), "kafka_reason": reason},
            )
            self._rejoin_reason = reason
        self._join_wanted.set()

    def need_rejoin(self) -> bool:
        """Whether the next ``ensure_active_group`` has work to do."""
        if not self._subscription.partitions_auto_assigned():
            return False
        if self.state != MemberState.STABLE or self._rejoin_reason is not None or self._lost_pending:
            return True
        if self._joined_topics != self._topics_to_join():
            return True
        return self._leader_metadata_changed()

    async def ensure_active_group(self, timeout_ms: float | None = None) -> bool:
        """In subscribe mode: join and sync until the member is stable, calling the listener in
        order; True once stable (or nothing to do). With ``timeout_ms``, give up (False) when it
        has passed between attempts, e.g. while the coordinator is unreachable (a JoinGroup or
        listener call under way is never cut short: that would leave a rebalance half done). Raises
        ``FencedInstanceIdError`` once fenced, and non-retriable join errors."""
        self._raise_if_fatal()
        error, self._background_join_error = self._background_join_error, None
        if error is not None:
            raise error
        if not self.need_rejoin():
            return True
        deadline = None if timeout_ms is None else self._clock.monotonic() + timeout_ms / 1000
        try:
            await self._clock.wait_for(self._join_lock.acquire(), self._remaining(deadline))
        except TimeoutError:
            return False  # another task's join is under way
        try:
            return await self._join_until_stable(deadline)
        finally:
            self._join_lock.release()

    async def _join_until_stable(self, deadline: float | None) -> bool:
        """The join loop (under the join lock): retriable failures are retried with backoff."""
        attempt = 0
        while self.need_rejoin():
            if self._closed:
                raise ConsumerStoppedError("the consumer is closed")
            self._raise_if_fatal()
            if deadline is not None and attempt and self._clock.monotonic() >= deadline:
                return False
            try:
                if not await self._join_once(deadline):
                    return False
                attempt = 0
            except _Retry as exc:
                log.debug("group %s: join attempt ended: %s", self.group_id, exc)
                self.state = MemberState.UNJOINED
                self._rejoin_reason = self._rejoin_reason or str(exc)
                attempt += 1
                if exc.backoff:
                    await self._backoff(attempt, deadline)
            except KafkaError as exc:
                self.state = MemberState.UNJOINED
                self._rejoin_reason = self._rejoin_reason or repr(exc)
                if self.observer is not None:
                    self.observer.rebalance_failed()
                if not exc.retriable:
                    raise
                if isinstance(exc, KafkaConnectionError | KafkaTimeoutError):
                    self._channel.forget()
                log.debug("group %s: join failed, retrying: %r", self.group_id, exc)
                attempt += 1
                await self._backoff(attempt, deadline)
        self._raise_if_fatal()
        self.record_poll()
        return True

    def _remaining(self, deadline: float | None) -> float | None:
        return None if deadline is None else max(0.0, deadline - self._clock.monotonic())

    async def _backoff(self, attempt: int, deadline: float | None) -> None:
        delay = self._retry_backoff.backoff_ms(attempt - 1) / 1000
        if deadline is not None:
            delay = max(0.0, min(delay, deadline - self._clock.monotonic()))
        await self._clock.sleep(delay)

    async def commit_offsets(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """OffsetCommit with the current generation and member id (generation -1 and no member in
        assign mode). ``CommitFailedError`` when the group rebalanced under these offsets."""
        if not offsets:
            return
        self._raise_if_fatal()
        if self._subscription.partitions_auto_assigned():
            if self.state != MemberState.STABLE or self.generation < 0:
                raise CommitFailedError(
                    f"group {self.group_id!r} is rebalancing (member {self.state.value}, generation "
                    f"{self.generation}): the partitions may not be ours any more"
                )
            generation, member_id, instance_id = self.generation, self.member_id, self.group_instance_id
        else:
            generation, member_id, instance_id = -1, "", None
        offsets = {
            tp: entry if isinstance(entry, OffsetAndMetadata) else OffsetAndMetadata(int(entry))
            for tp, entry in offsets.items()
        }
        request = commit_request(self.group_id, generation, member_id, instance_id, offsets)
        sent = self._clock.monotonic()
        response, _ = await self._channel.send_retrying(
            OffsetCommitRequest.API_KEY, lambda version: request, offset_commit_coordinator_error
        )
        latency_ms = (self._clock.monotonic() - sent) * 1000
        refused = commit_errors(response)
        for code in refused.values():
            self._on_commit_error(code)
        if refused:
            code = next(iter(refused.values()))
            names = ", ".join(f"{t.topic}-{t.partition}: {make_error(c).name}" for t, c in refused.items())
            raise make_error(code, f"OffsetCommit failed for {names}")
        self._last_committed.update(offsets)
        if self.observer is not None:
            self.observer.committed(offsets, latency_ms)

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

    def _on_commit_error(self, code: int) -> None:
        """What a refused commit means for the membership; raises for the membership errors."""
        if code == ErrorCode.FENCED_INSTANCE_ID:
            self._fence("OffsetCommit")
            self._raise_if_fatal()
        if code in _GENERATION_LOST:
            name = make_error(code).name
            self._reset_generation(
                f"OffsetCommit answered {name}", reset_member_id=code == ErrorCode.UNKNOWN_MEMBER_ID
            )
            raise CommitFailedError(
                f"commit rejected by group {self.group_id!r} ({name}): the member left the group or the "
                "group rebalanced; the partitions may belong to another member"
            )
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("OffsetCommit answered REBALANCE_IN_PROGRESS")
            raise CommitFailedError(
                f"commit rejected: group {self.group_id!r} is rebalancing; commit again after it"
            )

    # -- joining --------------------------------------------------------------------------------

    def _topics_to_join(self) -> frozenset[str]:
        topics = self._subscription.subscription
        if self.exclude_internal_topics and self._subscription.pattern is not None:
            topics = frozenset(t for t in topics if not t.startswith("__"))
        return topics

    def _leader_metadata_changed(self) -> bool:
        """Leader only: a subscribed topic's partition count differs from the last assignment's."""
        if not self._assigned_counts or self.leader_id != self.member_id:
            return False
        for topic, count in self._assigned_counts.items():
            now = self._topics.partition_count(topic)
            if now and now != count:
                self.request_rejoin(f"topic {topic} now has {now} partitions, not {count}")
                return True
        return False

    async def _join_once(self, deadline: float | None) -> bool:
        """One JoinGroup + SyncGroup round; ``_Retry`` when it must be repeated, False when the
        coordinator could not be reached before ``deadline`` (nothing was changed then)."""
        try:
            await self._clock.wait_for(self._channel.coordinator(), self._remaining(deadline))
        except TimeoutError:
            return False
        if self.observer is not None:
            self.observer.rebalance_started()
        await self._settle_lost_partitions()
        if self._needs_join_prepare:
            await self._on_join_prepare()
            self._needs_join_prepare = False
        topics = self._topics_to_join()
        self._joined_topics = topics
        self.state = MemberState.REBALANCING
        reason, self._rejoin_reason = self._rejoin_reason, None
        owned = sorted(self._subscription.assigned_partitions())
        protocols = [
            JoinGroupRequest.JoinGroupRequestProtocol(
                name=assignor.name,
                metadata=encode_subscription(
                    Subscription(
                        topics=sorted(topics),
                        user_data=assignor.subscription_user_data(set(topics)),
                        owned_partitions=owned,
                        generation_id=self.generation,
                    )
                ),
            )
            for assignor in self.assignors
        ]
        request = JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=protocols,
            reason=reason,
        )
        # The coordinator holds JoinGroup until every member joined or the rebalance timeout ends.
        timeout_ms = max(self._request_timeout_ms, self.rebalance_timeout_ms + 5000)
        response, _, node = await self._channel.send(JoinGroupRequest.API_KEY, lambda _: request, timeout_ms)
        self._check_join_error(response.error_code, response.member_id, node)
        self.member_id = response.member_id
        self.generation = response.generation_id
        self.protocol_name = response.protocol_name
        self.leader_id = response.leader
        log.info(
            "group %s: joined generation %d as %s (%s, protocol %s)",
            self.group_id,
            self.generation,
            self.member_id,
            "leader" if self.leader_id == self.member_id else "follower",
            self.protocol_name,
            extra={**self._log_fields(), "kafka_leader": self.leader_id == self.member_id},
        )
        assignments: dict[str, bytes] = {}
        if self.leader_id != self.member_id:
            self._assigned_counts = {}
        elif getattr(response, "skip_assignment", False):
            # A static leader rejoining a stable group (KIP-814): the assignment stands; keep
            # watching our topics so a later change still rebalances the group.
            counts = await partition_counts(self._channel, sorted(topics))
            self._assigned_counts = {t: counts.get(t, 0) for t in topics}
        else:
            assignments = await self._assign(response.protocol_name, response.members)
        sync = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=self.protocol_name,
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in assignments.items()
            ],
        )
        sync_response, sync_version, node = await self._channel.send(
            SyncGroupRequest.API_KEY, lambda _: sync, timeout_ms
        )
        self._check_sync_error(sync_response.error_code, node)
        if sync_version >= 5 and sync_response.protocol_name not in (None, self.protocol_name):
            raise make_error(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"SyncGroup named protocol {sync_response.protocol_name!r}, JoinGroup {self.protocol_name!r}",
            )
        self.state = MemberState.STABLE
        self._joined_metadata = ConsumerGroupMetadata(
            self.group_id, self.generation, self.member_id, self.group_instance_id
        )
        await self._on_join_complete(bytes(sync_response.assignment or b""))
        self._needs_join_prepare = True
        self.rebalances += 1
        if self.observer is not None:
            self.observer.rebalance_completed()
        return True

    def _log_fields(self) -> dict[str, object]:
        """The ``extra`` fields of the group's structured log lines."""
        return {
            "kafka_group_id": self.group_id,
            "kafka_member_id": self.member_id,
            "kafka_group_instance_id": self.group_instance_id,
            "kafka_generation": self.generation,
        }

    def _check_join_error(self, code: int, member_id: str, node: int) -> None:
        if not code:
            return
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            # KIP-394: join again at once with the id the coordinator just handed out.
            self.member_id = member_id
            raise _Retry("the coordinator handed out a member id", backoff=False)
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            # As Java's joinGroupIfNeeded: join again at once, as a new member.
            self.member_id = ""
            raise _Retry("JoinGroup: unknown member id", backoff=False)
        if code == ErrorCode.ILLEGAL_GENERATION:
            self.generation = -1
            raise _Retry("JoinGroup: illegal generation")
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            raise _Retry("JoinGroup: rebalance in progress", backoff=False)
        if code == LOAD_IN_PROGRESS:
            raise _Retry("JoinGroup: coordinator loading")
        if code in COORDINATOR_ERRORS:
            self._channel.forget(node)
            raise _Retry(f"JoinGroup: {make_error(code).name}")
        if code == ErrorCode.FENCED_INSTANCE_ID:
            self._fence("JoinGroup")
            self._raise_if_fatal()
        raise make_error(code, f"JoinGroup to group {self.group_id!r}")

    def _check_sync_error(self, code: int, node: int) -> None:
        if not code:
            return
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            raise _Retry("SyncGroup: rebalance in progress", backoff=False)
        if code in _GENERATION_LOST:
            self._reset_generation(
                f"SyncGroup answered {make_error(code).name}",
                reset_member_id=code == ErrorCode.UNKNOWN_MEMBER_ID,
            )
            raise _Retry(f"SyncGroup: {make_error(code).name}", backoff=False)
        if code in COORDINATOR_ERRORS:
            self._channel.forget(node)
            raise _Retry(f"SyncGroup: {make_error(code).name}")
        if code == ErrorCode.FENCED_INSTANCE_ID:
            self._fence("SyncGroup")
            self._raise_if_fatal()
        if code == ErrorCode.INVALID_REQUEST:
            # librdkafka's mock cluster answers a SyncGroup that reaches a group it already
            # considers stable with INVALID_REQUEST (Kafka answers with the member's assignment):
            # joining again is the way back into the group.
            raise _Retry("SyncGroup: INVALID_REQUEST from a group already stable")
        raise make_error(code, f"SyncGroup to group {self.group_id!r}")

    async def _assign(self, protocol_name: str | None, members: list[Any]) -> dict[str, bytes]:
        """Leader: run the chosen assignor over every member's subscription."""
        assignor = choose_assignor(self.assignors, protocol_name)
        subscriptions, instance_ids = decode_members(members)
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        counts = await partition_counts(self._channel, topics)
        # Our own topics (the ones this client's metadata tracks), 0 for those that do not exist
        # yet: a change in any of them makes the leader rebalance the group.
        self._assigned_counts = {t: counts.get(t, 0) for t in self._joined_topics_or_empty()}
        for topic in self._assigned_counts:
            self._topics.track(topic)
        return assign(assignor, self.protocol, subscriptions, instance_ids, counts)

    def _joined_topics_or_empty(self) -> frozenset[str]:
        return self._joined_topics or frozenset()

    # -- listener steps -------------------------------------------------------------------------

    async def _call(self, hook: str, partitions: Iterable[TopicPartition]) -> None:
        listener = self._subscription.listener
        if listener is None:
            return
        try:
            await call_listener(listener, hook, set(partitions))
        except Exception:
            log.exception("group %s: rebalance listener %s failed", self.group_id, hook)

    async def _settle_lost_partitions(self) -> None:
        """After a reset generation: the partitions we held are lost (no commit, no revoke)."""
        if not self._lost_pending:
            return
        self._lost_pending = False
        lost = self._subscription.assigned_partitions()
        if lost:
            log.info("group %s: partitions lost: %s", self.group_id, sorted(lost))
            await self._call("on_partitions_lost", lost)
            self._subscription.assign_from_subscribed([])

    async def _on_join_prepare(self) -> None:
        """Before JoinGroup. Eager: commit (auto-commit) and revoke everything. Cooperative: revoke
        only partitions of topics no longer subscribed; the rest stay ours while we rejoin."""
        assigned = self._subscription.assigned_partitions()
        if self.protocol == RebalanceProtocol.EAGER:
            revoked = assigned
        else:
            topics = self._topics_to_join()
            revoked = {tp for tp in assigned if tp.topic not in topics}
        if not revoked:
            return
        self._subscription.mark_for_revocation(revoked)
        if self.enable_auto_commit and self.generation >= 0:
            await self._commit_before_revoke(revoked)
        await self._call("on_partitions_revoked", revoked)
        self._subscription.assign_from_subscribed(assigned - revoked)

    async def _on_join_complete(self, assignment_bytes: bytes) -> None:
        # A heartbeat may have lost the old generation while this join ran: say so first.
        await self._settle_lost_partitions()
        assignment = decode_assignment(assignment_bytes) if assignment_bytes else Assignment(partitions=[])
        new = {TopicPartition(*tp) for tp in assignment.partitions}
        outside = {tp for tp in new if tp.topic not in self._joined_topics_or_empty()}
        if outside:
            log.warning("group %s: assigned partitions of topics not subscribed: %s", self.group_id, outside)
        assignor = next((a for a in self.assignors if a.name == self.protocol_name), None)
        if assignor is not None:
            assignor.on_assignment(assignment, self.generation)
        owned = self._subscription.assigned_partitions()
        change = assignment_change(self.protocol, owned, new)
        log.info(
            "group %s: generation %d assignment %s (revoked %s)",
            self.group_id,
            self.generation,
            sorted(new),
            sorted(change.revoked),
            extra={
                **self._log_fields(),
                "kafka_assignment": [f"{tp.topic}-{tp.partition}" for tp in sorted(new)],
                "kafka_revoked": [f"{tp.topic}-{tp.partition}" for tp in sorted(change.revoked)],
            },
        )
        if change.revoked:
            self._subscription.mark_for_revocation(change.revoked)
            if self.enable_auto_commit:
                await self._commit_before_revoke(change.revoked)
            await self._call("on_partitions_revoked", change.revoked)
        self._subscription.assign_from_subscribed(new)
        await self._call("on_partitions_assigned", change.assigned)
        if change.rejoin:
            self.request_rejoin("partitions were revoked: a second round hands them out")

    async def _commit_before_revoke(self, revoked: set[TopicPartition] | frozenset[TopicPartition]) -> None:
        offsets = {tp: o for tp, o in self._subscription.all_consumed_offsets().items() if tp in revoked}
        if not offsets:
            return
        try:
            await self.commit_offsets(offsets)
        except KafkaError as exc:
            log.warning("group %s: commit before revoking %s failed: %r", self.group_id, sorted(offsets), exc)

    # -- membership loss ------------------------------------------------------------------------

    def _reset_generation(self, reason: str, *, reset_member_id: bool) -> None:
        """The membership is gone: partitions we hold are lost (the next poll tells the listener)."""
        log.info(
            "group %s: membership reset: %s",
            self.group_id,
            reason,
            extra={**self._log_fields(), "kafka_reason": reason},
        )
        self.generation = -1
        if reset_member_id:
            self.member_id = ""
        self.state = MemberState.UNJOINED
        self.request_rejoin(reason)
        assigned = self._subscription.assigned_partitions()
        if assigned and self._subscription.partitions_auto_assigned():
            self._lost_pending = True
            self._subscription.mark_for_revocation(assigned)

    def _fence(self, where: str) -> None:
        if self._fatal is None:
            self._fatal = FencedInstanceIdError(
                f"group {self.group_id!r}: another consumer joined with group_instance_id "
                f"{self.group_instance_id!r}, so this one was fenced ({where} answered FENCED_INSTANCE_ID); "
                "it can no longer consume or commit for the group"
            )
            log.error("%s", self._fatal, extra={**self._log_fields(), "kafka_fenced": True})
        self.state = MemberState.UNJOINED
        assigned = self._subscription.assigned_partitions()
        if assigned and self._subscription.partitions_auto_assigned():
            self._subscription.mark_for_revocation(assigned)

    def _raise_if_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    # -- coordinator and requests ---------------------------------------------------------------

    async def _leave_group(self, reason: str) -> None:
        """LeaveGroup for this (dynamic) member; best effort: the session timeout also removes it."""
        member_id = self.member_id
        self.member_id, self.generation, self.state = "", -1, MemberState.UNJOINED

        def build(version: int) -> LeaveGroupRequest:
            if version >= 3:
                return LeaveGroupRequest(
                    group_id=self.group_id,
                    members=[
                        LeaveGroupRequest.MemberIdentity(
                            member_id=member_id, group_instance_id=self.group_instance_id, reason=reason
                        )
                    ],
                )
            return LeaveGroupRequest(group_id=self.group_id, member_id=member_id)

        try:
            for attempt in range(2):
                try:
                    response = (await self._channel.send(LeaveGroupRequest.API_KEY, build)).response
                    break
                except KafkaConnectionError:
                    if attempt:
                        raise
            member_codes = [m.error_code for m in response.members or [] if m.error_code]
            code = response.error_code or (member_codes[0] if member_codes else 0)
            if code:
                log.info("group %s: LeaveGroup answered %s", self.group_id, make_error(code).name)
            else:
                log.info("group %s: left the group (%s)", self.group_id, reason)
        except (KafkaError, ValueError) as exc:  # ValueError: DecodeError of a malformed answer
            log.info("group %s: LeaveGroup failed: %r", self.group_id, exc)

    # -- background tasks -----------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval = self.heartbeat_interval_ms / 1000
        while not self._closed:
            await self._clock.sleep(interval)
            if self._fatal is not None:
                continue
            if self._poll_timed_out():
                await self._on_poll_timeout()
                continue
            if self.state != MemberState.STABLE or self.generation < 0:
                continue
            try:
                await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                log.debug("group %s: heartbeat failed: %r", self.group_id, exc)
                interval = self.retry_backoff_ms / 1000
                continue
            except Exception:
                log.exception("group %s: heartbeat task error", self.group_id)
            interval = self.heartbeat_interval_ms / 1000

    async def _heartbeat(self) -> None:
        generation, member_id = self.generation, self.member_id
        request = HeartbeatRequest(
            group_id=self.group_id,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=self.group_instance_id,
        )
        response, _, node = await self._channel.send(HeartbeatRequest.API_KEY, lambda _: request)
        code = response.error_code
        if not code or generation != self.generation or self.state != MemberState.STABLE:
            return  # answered for a generation we already left behind
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("the group is rebalancing")
        elif code in _GENERATION_LOST:
            self._reset_generation(
                f"Heartbeat answered {make_error(code).name}",
                reset_member_id=code == ErrorCode.UNKNOWN_MEMBER_ID,
            )
        elif code == ErrorCode.FENCED_INSTANCE_ID:
            self._fence("Heartbeat")
        elif code in COORDINATOR_ERRORS:
            self._channel.forget(node)
            raise make_error(code, "Heartbeat")
        else:
            raise make_error(code, "Heartbeat")

    def _poll_timed_out(self) -> bool:
        # A poll blocked in a rebalance is still a poll: only a stable member can time out.
        if not self.member_id or self.state != MemberState.STABLE or self._join_lock.locked():
            return False
        return (self._clock.monotonic() - self._last_poll) * 1000 > self.max_poll_interval_ms

    async def _on_poll_timeout(self) -> None:
        log.warning(
            "group %s: no poll for more than max_poll_interval_ms=%d: leaving the group; the next poll "
            "rejoins (process records faster or raise max_poll_interval_ms)",
            self.group_id,
            self.max_poll_interval_ms,
        )
        self._join_waits_for_poll = True
        if self.group_instance_id is None:
            await self._leave_group("max_poll_interval_ms expired")
        self._reset_generation("max_poll_interval_ms expired", reset_member_id=True)

    async def _join_loop(self) -> None:
        """The background join task: ``ensure_active_group`` whenever a rebalance is needed,
        looked at when woken (``request_rejoin``, ``wake_join``, a poll after a poll timeout) and
        every heartbeat interval (the leader's metadata check). A non-retriable join error is kept
        for the next poll to raise; a fenced member stops joining."""
        interval = self.heartbeat_interval_ms / 1000
        while not self._closed:
            self._join_wanted.clear()
            if self._fatal is None and not self._join_waits_for_poll and self.need_rejoin():
                try:
                    await self.ensure_active_group()
                except asyncio.CancelledError:
                    raise
                except ConsumerStoppedError:
                    return
                except KafkaError as exc:
                    if exc is not self._fatal:
                        log.warning("group %s: background join failed: %r", self.group_id, exc)
                        self._background_join_error = exc
                        self._join_waits_for_poll = True
                    continue
                except Exception:
                    log.exception("group %s: join task error", self.group_id)
                    self._join_waits_for_poll = True
                    continue
            with contextlib.suppress(TimeoutError):
                await self._clock.wait_for(self._join_wanted.wait(), interval)

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
            if self.state != MemberState.STABLE or self.generation < 0 or self._rejoin_reason is not None:
                return
            if stop_when_closed and self._closed:
                return
        elif not subscription.user_assigned:
            return
        offsets = {
            tp: o
            for tp, o in subscription.all_consumed_offsets().items()
            if self._last_committed.get(tp) != o and not getattr(subscription.get_state(tp), "revoking", True)
        }
        if offsets:
            await self.commit_offsets(offsets)
