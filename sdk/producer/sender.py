"""The Sender: one task that turns ready batches into Produce requests and handles the answers.

Each pass (Java's ``Sender.runOnce``): get a producer id if idempotence needs one, find brokers
with sendable batches, drain one request per broker that is connected and below
``max_in_flight_requests_per_connection``, expire batches past ``delivery_timeout_ms``, then sleep
until the next linger deadline or until something changes (an append fills a batch, a response
arrives, a connection is made, metadata is refreshed).

Responses are handled in callbacks: success resolves the batch's records; retriable errors put
the batch back (in sequence order) after a backoff and request a metadata refresh where the error
means the leader moved; everything else fails the batch. With idempotence, a partition with a
batch put back for a retry sends only its oldest unacknowledged batch until all are acknowledged
(``TransactionManager.retry_pending``), so nothing overtakes a batch that failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

from sdk.errors import (
    AuthenticationError,
    DeliveryTimeoutError,
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    ProducerClosedError,
    make_error,
)
from sdk.metrics.producer import ProducerMetrics
from sdk.producer.accumulator import RecordAccumulator
from sdk.producer.batch import ProducerBatch
from sdk.producer.clock import SYSTEM_CLOCK, Cancellable, ProducerClock
from sdk.producer.interceptors import InterceptorChain
from sdk.producer.network_port import ProducerPort
from sdk.producer.transaction_manager import TransactionManager
from sdk.protocol import messages

__all__ = ["Sender", "TransactionalRequest"]

log = logging.getLogger(__name__)

#: Errors meaning the client's metadata is stale (Java's InvalidMetadataException family).
METADATA_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
    }
)
_IDLE_POLL_MS = 1000.0
_SOCKET_POLL_MS = 2.0
#: Newest Produce version of transaction protocol v1: from v12 a Produce request with a
#: transactional id adds its partitions to the transaction (KIP-890), which a v1 producer does
#: with AddPartitionsToTxn (Java's ``LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2``).
PRODUCE_VERSION_BEFORE_TV2 = 11

ProduceData = messages.ProduceRequest.TopicProduceData
PartitionData = messages.ProduceRequest.PartitionProduceData


class TransactionalRequest:
    """A request the sender puts on the wire ahead of produce requests (Java's
    ``TxnRequestHandler``): InitProducerId now; AddPartitionsToTxn, AddOffsetsToTxn and EndTxn
    with transactions.

    ``build(version)`` makes the request for the version negotiated with the target broker;
    ``node()`` names that broker (e.g. the transaction coordinator), or None for any ready one.
    ``future`` gets the response, or the connection's error; retrying is the caller's decision.
    """

    __slots__ = ("api_key", "build", "future", "max_version", "node")

    def __init__(
        self,
        api_key: int,
        build: Callable[[int], messages.Message],
        node: Callable[[], int | None] | None = None,
        max_version: int | None = None,
    ):
        self.api_key = api_key
        self.build = build
        self.node = node
        #: Highest version to send (e.g. AddPartitionsToTxn v4+ is for brokers only).
        self.max_version = max_version
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()


class Sender:
    """Moves batches from the accumulator to the brokers."""

    def __init__(
        self,
        port: ProducerPort,
        accumulator: RecordAccumulator,
        txn: TransactionManager | None,
        *,
        acks: int,
        request_timeout_ms: float,
        max_request_size: int,
        max_in_flight: int,
        interceptors: InterceptorChain | None,
        clock: ProducerClock = SYSTEM_CLOCK,
        metrics: ProducerMetrics | None = None,
    ):
        #: The network, only through the port (``sdk.producer.network_port``), and time, only
        #: through the clock: both are fakes in the sender's unit tests.
        self._port = port
        self._clock = clock
        self._acc = accumulator
        self._txn = txn
        self._acks = acks
        self._request_timeout_ms = int(request_timeout_ms)
        self._max_request_size = max_request_size
        self._max_in_flight = max_in_flight
        self._interceptors = interceptors
        #: Sensors recorded per request and per batch (never per record).
        self._metrics = metrics
        self._in_flight: dict[int, int] = {}
        self._on_wire: set[ProducerBatch] = set()
        self._task: asyncio.Task[None] | None = None
        self._init_task: asyncio.Task[None] | None = None
        #: Transactional requests waiting to be sent, oldest first, and the one on the wire.
        self._txn_queue: deque[TransactionalRequest] = deque()
        self._txn_in_flight: TransactionalRequest | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self._timer: Cancellable | None = None
        #: When ``_timer`` fires, on the clock (seconds).
        self._timer_due = 0.0
        self._woken = False
        self._stopping = False
        self._forced: BaseException | None = None
        self._fatal: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Called once when the producer can no longer send (a fatal InitProducerId error).
        self.on_fatal: Callable[[], None] | None = None
        #: Run at every pass once the producer id is known: the transactional producer adds
        #: partitions to its transaction and drops batches of an aborted one there.
        self.before_drain: Callable[[], None] | None = None
        self._transactional_id = txn.transactional_id if txn is not None else None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._port.add_listener(self.wake)
        self._task = self._loop.create_task(self._run(), name="kafka-producer-sender")

    def wake(self) -> None:
        """Run a pass soon (cheap to call often)."""
        self._woken = True
        waiter = self._wakeup
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def enqueue_transactional(self, request: TransactionalRequest) -> asyncio.Future[Any]:
        """Queue ``request`` to be sent before the next produce request; the future gets the
        response. While one is queued or on the wire, no produce request is sent (as in Java's
        ``Sender.maybeSendAndPollTransactionalRequest``), so a transaction's AddPartitionsToTxn or
        EndTxn is never overtaken by the produce requests that depend on it."""
        self._txn_queue.append(request)
        self.wake()
        return request.future

    async def send_transactional(self, request: TransactionalRequest) -> Any:
        """``enqueue_transactional`` and wait for the response."""
        return await self.enqueue_transactional(request)

    @property
    def fatal_error(self) -> BaseException | None:
        return self._fatal

    @property
    def requests_in_flight(self) -> int:
        return sum(self._in_flight.values())

    async def close(self, timeout: float | None = None) -> None:
        """Send everything queued, wait for the answers, then stop; after ``timeout`` seconds,
        fail what is left with ``ProducerClosedError``."""
        self._stopping = True
        self._acc.close()
        self.wake()
        task = self._task
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            self.force_close(ProducerClosedError("producer closed before these records were acknowledged"))
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            self._port.remove_listener(self.wake)
            if self._init_task is not None:
                self._init_task.cancel()
            while self._txn_queue:
                request = self._txn_queue.popleft()
                if not request.future.done():
                    request.future.set_exception(
                        ProducerClosedError("producer closed before this request was sent")
                    )

    def abort_undrained(self, error: BaseException) -> None:
        """Fail every batch not sent yet with ``error`` (its transaction is being aborted)."""
        for batch in self._acc.abort_undrained():
            self._fail(batch, error, aborted=True)

    def force_close(self, error: BaseException) -> None:
        """Stop now: fail queued batches, and in-flight ones when their answer comes."""
        self._forced = error
        for batch in self._acc.abort_undrained():
            self._fail(batch, error, aborted=True)
        self.wake()

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._loop is not None
        loop = self._loop
        clock = self._clock
        try:
            while True:
                try:
                    delay = self._run_once()
                except Exception:
                    log.exception("producer sender pass failed")
                    delay = 100.0
                if self._stopping or self._forced is not None:
                    idle = not self._on_wire and not self._acc.has_incomplete
                    if idle or (self._forced is not None and not self._on_wire):
                        return
                if self._woken:
                    self._woken = False
                    await asyncio.sleep(0)
                    continue
                waiter = self._wakeup = loop.create_future()
                # One timer for the next deadline, replaced only when a pass needs an earlier
                # one: a timer per wait (made and cancelled at every pass, several per batch)
                # costs more than the occasional early wake-up of a kept one.
                wait_s = min(delay, _IDLE_POLL_MS) / 1000
                deadline = clock.monotonic() + wait_s
                if self._timer is None or deadline < self._timer_due:
                    if self._timer is not None:
                        self._timer.cancel()
                    self._timer = clock.call_later(wait_s, self._on_timer)
                    self._timer_due = deadline
                try:
                    await waiter
                finally:
                    self._wakeup = None
                self._woken = False
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        waiter = self._wakeup
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _run_once(self) -> float:
        now = self._clock.monotonic() * 1000
        acc = self._acc
        txn = self._txn
        if self._forced is not None:
            for batch in acc.abort_undrained():
                self._fail(batch, self._forced, aborted=True)
            return _IDLE_POLL_MS
        if txn is not None:
            txn.maybe_resolve_sequences()
            if txn.fatal_error is not None:
                self._fail_everything(txn.fatal_error)
                return _IDLE_POLL_MS
            if txn.needs_init(not self._on_wire):
                self._start_init_producer_id()
            if self.before_drain is not None:
                self.before_drain()
        if self._txn_in_flight is not None or self._txn_queue:
            delay = self._maybe_send_transactional()
            if delay is not None:
                # A transactional request goes first: produce requests wait for its answer.
                return min(delay, acc.next_expiry_delay(now))
        port = self._port
        ready, next_delay, unknown_leaders = acc.ready(port.cluster, now)
        if unknown_leaders:
            port.request_metadata_update()
        for node_id, queues in ready.items():
            if self._in_flight.get(node_id, 0) >= self._max_in_flight or not port.ready(node_id):
                continue
            if port.write_buffer_size(node_id) > self._max_request_size:
                # The socket is not keeping up (acks=0 has no in-flight limit): wait for it.
                next_delay = min(next_delay, _SOCKET_POLL_MS)
                continue
            batches = acc.drain(node_id, queues, self._max_request_size, now, txn)
            if batches:
                self._send_produce(node_id, batches, now)
        for batch in acc.expired_batches(now):
            error = DeliveryTimeoutError(
                f"expiring {batch.record_count} record(s) for {batch.topic}-{batch.partition}: "
                f"{now - batch.created_ms:.0f} ms passed since batch creation "
                f"(delivery_timeout_ms={acc.delivery_timeout_ms:.0f})"
            )
            self._fail(batch, error)
        return min(next_delay, acc.next_expiry_delay(now))

    # -- transactional requests -----------------------------------------------------------------

    def _maybe_send_transactional(self) -> float | None:
        """Send the oldest queued transactional request if its broker is ready. Returns how long
        to wait before the next pass while a transactional request is queued or on the wire (no
        produce request this pass), None when there is none."""
        if self._txn_in_flight is not None:
            return _IDLE_POLL_MS  # its answer wakes the sender
        queue = self._txn_queue
        while queue and queue[0].future.done():
            queue.popleft()  # the caller gave up (cancelled)
        if not queue:
            return None
        request = queue[0]
        port = self._port
        node_id = request.node() if request.node is not None else port.least_loaded_node()
        if node_id is None:
            port.request_metadata_update()
            return float(port.retry_backoff.backoff_ms(0))
        if not port.ready(node_id):  # starts connecting; the port's listener wakes us
            refused = port.authentication_error(node_id)
            if refused is not None:
                # Java's awaitNodeReady: a refused login fails the request, it is not retried.
                queue.popleft().future.set_exception(refused)
                return 0.0
            return float(port.retry_backoff.backoff_ms(0))
        queue.popleft()
        try:
            version = port.version_for(node_id, request.api_key)
            if request.max_version is not None:
                version = min(version, request.max_version)
            response = port.send(node_id, request.build(version), version)
        except Exception as exc:
            request.future.set_exception(exc)
            return 0.0
        assert response is not None
        self._txn_in_flight = request
        response.add_done_callback(lambda done: self._transactional_done(request, done))
        return _IDLE_POLL_MS

    def _transactional_done(self, request: TransactionalRequest, response: asyncio.Future[Any]) -> None:
        self._txn_in_flight = None
        if not request.future.done():
            if response.cancelled():
                request.future.cancel()
            elif (error := response.exception()) is not None:
                request.future.set_exception(error)
            else:
                request.future.set_result(response.result())
        self.wake()

    # -- produce --------------------------------------------------------------------------------

    def _send_produce(self, node_id: int, batches: list[ProducerBatch], now: float) -> None:
        by_topic: dict[str, list[Any]] = {}
        metrics = self._metrics
        records = 0
        for batch in batches:
            payload = batch.payload
            data = PartitionData(index=batch.partition, records=payload)
            entries = by_topic.get(batch.topic)
            if entries is None:
                by_topic[batch.topic] = [data]
            else:
                entries.append(data)
            if metrics is not None and payload is not None:
                size = len(payload)
                metrics.batch_size.record(size, now)
                metrics.compression_rate.record(size / (batch.builder.estimated_size() or 1), now)
                metrics.queue_time.record(now - batch.created_ms, now)
                records += batch.record_count
        if metrics is not None:
            metrics.records_per_request.record(records, now)
        request = messages.ProduceRequest(
            transactional_id=self._transactional_id,
            acks=self._acks,
            timeout_ms=self._request_timeout_ms,
            topic_data=[ProduceData(name=topic, partition_data=parts) for topic, parts in by_topic.items()],
        )
        port = self._port
        try:
            if self._acks == 0:
                port.send(node_id, request, expect_response=False)
                for batch in batches:
                    self._acc.unmute(batch)
                    self._complete(batch, -1, -1, -1)
                return
            version = None
            txn = self._txn
            if self._transactional_id is not None and txn is not None and not txn.transaction_v2:
                version = min(
                    port.version_for(node_id, messages.ProduceRequest.API_KEY), PRODUCE_VERSION_BEFORE_TV2
                )
            future = port.send(node_id, request, version)
        except KafkaError as exc:
            for batch in batches:
                self._acc.unmute(batch)
                self._handle_error(batch, exc, now)
            return
        assert future is not None
        self._in_flight[node_id] = self._in_flight.get(node_id, 0) + 1
        self._on_wire.update(batches)
        future.add_done_callback(partial(self._on_produce_response, node_id, batches, now))

    def _on_produce_response(
        self, node_id: int, batches: list[ProducerBatch], sent_ms: float, future: asyncio.Future[Any]
    ) -> None:
        self._in_flight[node_id] -= 1
        now = self._clock.monotonic() * 1000
        metrics = self._metrics
        if metrics is not None:
            metrics.request_latency.record(now - sent_ms, now)
        on_wire = self._on_wire
        for batch in batches:
            on_wire.discard(batch)
            self._acc.unmute(batch)
        error = (
            KafkaConnectionError("produce request cancelled") if future.cancelled() else future.exception()
        )
        if error is not None:
            if not isinstance(error, KafkaError):
                error = KafkaConnectionError(f"produce request to broker {node_id} failed: {error!r}")
            for batch in batches:
                self._handle_error(batch, error, now)
            self.wake()
            return
        response = future.result()
        if metrics is not None:
            metrics.throttle_time.record(response.throttle_time_ms, now)
        results: dict[tuple[str, int], Any] = {}
        for topic in response.responses:
            for part in topic.partition_responses:
                results[(topic.name, part.index)] = part
        for batch in batches:
            part = results.get((batch.topic, batch.partition))
            if part is None:
                self._handle_error(
                    batch,
                    KafkaConnectionError(
                        f"broker {node_id} did not answer for {batch.topic}-{batch.partition}"
                    ),
                    now,
                )
                continue
            code = part.error_code
            if code == ErrorCode.NONE or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                self._complete(batch, part.base_offset, part.log_append_time_ms, part.log_start_offset)
            else:
                message = part.error_message
                if part.record_errors:
                    details = "; ".join(
                        f"record {e.batch_index}: {e.batch_index_error_message}" for e in part.record_errors
                    )
                    message = f"{message or ''} ({details})"
                self._handle_error(batch, make_error(code, message), now)
        self.wake()

    def _handle_error(self, batch: ProducerBatch, error: KafkaError, now: float) -> None:
        if error.code in METADATA_ERRORS or isinstance(error, KafkaConnectionError):
            self._port.request_metadata_update()
        if self._forced is not None:
            self._fail(batch, self._forced)
            return
        expired = now - batch.created_ms >= self._acc.delivery_timeout_ms
        if expired:
            timeout = DeliveryTimeoutError(
                f"expiring {batch.record_count} record(s) for {batch.topic}-{batch.partition}: "
                f"{now - batch.created_ms:.0f} ms passed since batch creation; last error: {error}"
            )
            timeout.__cause__ = error
            self._fail(batch, timeout)
            return
        txn = self._txn
        if error.code == ErrorCode.MESSAGE_TOO_LARGE and batch.record_count > 1:
            # The broker's limit is below ours: halve the batch rather than fail every record in it.
            halves = self._acc.split_and_reenqueue(batch)
            if self._metrics is not None:
                self._metrics.splits.record(1.0, now)
            if txn is not None and batch.has_sequence:
                txn.replace_split(batch, halves)
                txn.retry_pending(halves[0])
            return
        retry = txn.can_retry(batch, error) if txn is not None and batch.has_sequence else error.retriable
        if retry:
            log.warning(
                "retrying %d record(s) for %s-%d after %s (attempt %d)",
                batch.record_count,
                batch.topic,
                batch.partition,
                error,
                batch.attempts + 1,
                extra={
                    "kafka_topic": batch.topic,
                    "kafka_partition": batch.partition,
                    "kafka_error": type(error).__name__,
                    "kafka_attempt": batch.attempts + 1,
                    "kafka_records": batch.record_count,
                },
            )
            if self._metrics is not None:
                self._metrics.retries.record(batch.record_count, now)
            if txn is not None and batch.has_sequence:
                # Its partition now sends only its oldest unacknowledged batch (see
                # TransactionManager): nothing drained after this retry may overtake it.
                txn.retry_pending(batch)
            self._acc.reenqueue(batch, now)
        else:
            self._fail(batch, error)

    def _complete(
        self, batch: ProducerBatch, base_offset: int, log_append_time: int, log_start_offset: int
    ) -> None:
        if self._txn is not None:
            self._txn.on_success(batch)
        self._acc.done(batch)
        batch.complete(base_offset, log_append_time, log_start_offset, self._interceptors)

    def _fail(self, batch: ProducerBatch, error: BaseException, aborted: bool = False) -> None:
        """Fail ``batch``; ``aborted`` batches (a transaction's abort, a forced close, a fatal
        error) are not send errors in the metrics, as Java's ``abortBatches`` records none."""
        if self._metrics is not None and not aborted:
            self._metrics.errors.record(batch.record_count)
        if self._txn is not None:
            self._txn.on_failure(batch, error)
        self._acc.done(batch)
        batch.fail(error, self._interceptors)

    def _fail_everything(self, error: BaseException) -> None:
        if self._fatal is None and self.on_fatal is not None:
            self.on_fatal()
        self._fatal = error
        for batch in self._acc.abort_undrained():
            self._fail(batch, error, aborted=True)

    # -- producer id ----------------------------------------------------------------------------

    def _start_init_producer_id(self) -> None:
        assert self._loop is not None and self._txn is not None
        if self._init_task is not None and not self._init_task.done():
            return
        self._txn.init_in_progress = True
        self._init_task = self._loop.create_task(self._init_producer_id(), name="kafka-init-producer-id")

    def _init_producer_id_request(self, sent: list[int], version: int) -> messages.InitProducerIdRequest:
        """InitProducerId for ``version``: a new id, or (v3+, KIP-360) a bump of the current epoch."""
        txn = self._txn
        assert txn is not None
        producer_id, epoch = txn.begin_init(version >= 3)
        sent.append(producer_id)
        return messages.InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout_ms=int(txn.transaction_timeout_ms),
            producer_id=producer_id,
            producer_epoch=epoch,
        )

    async def _init_producer_id(self) -> None:
        txn = self._txn
        assert txn is not None
        attempts = 0
        port = self._port
        while True:
            try:
                await port.wait_for_node()
                sent: list[int] = []  # the producer id the request carried (-1: a new one)
                build = partial(self._init_producer_id_request, sent)
                response = await self.send_transactional(
                    TransactionalRequest(messages.InitProducerIdRequest.API_KEY, build)
                )
                producer_id = sent[-1]
                if response.error_code:
                    error = make_error(response.error_code, "InitProducerId")
                    if producer_id >= 0 and not error.retriable:
                        # The broker refused the bump (e.g. it fenced the epoch): start afresh.
                        txn.fresh_id_required = True
                        raise error
                    if not error.retriable:
                        txn.init_failed(error)
                        log.error("idempotent producer cannot get a producer id: %s", error)
                        self.wake()
                        return
                    raise error
                txn.set_producer_id(response.producer_id, response.producer_epoch)
                log.debug("producer id %d epoch %d", response.producer_id, response.producer_epoch)
                self.wake()
                return
            except asyncio.CancelledError:
                txn.init_in_progress = False
                raise
            except AuthenticationError as exc:
                # Fatal, as Java's AuthenticationException: another login would be refused again.
                txn.init_failed(exc)
                log.error("idempotent producer cannot get a producer id: %r", exc)
                self.wake()
                return
            except (KafkaError, OSError) as exc:
                attempts += 1
                log.debug("InitProducerId failed (%r); retrying", exc)
                txn.init_in_progress = True
                await self._clock.sleep(port.retry_backoff.backoff_ms(attempts - 1) / 1000)
