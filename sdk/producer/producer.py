"""The asyncio Producer (aiokafka-style API, Java-client semantics)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Iterable
from time import time_ns as _time_ns
from typing import Any

from sdk.client.client import KafkaClient
from sdk.client.sasl import SaslMechanism
from sdk.errors import (
    IllegalStateError,
    InvalidPartitionError,
    KafkaError,
    MetadataTimeoutError,
    ProducerClosedError,
    RecordTooLargeError,
    SerializationError,
    make_error,
)
from sdk.producer.accumulator import RecordAccumulator, now_ms
from sdk.producer.batch import ProducerBatch
from sdk.producer.batch_api import BatchSendMixin, Headers
from sdk.producer.config import ProducerConfig
from sdk.producer.futures import LazyRecordFuture, RecordFuture
from sdk.producer.interceptors import InterceptorChain, ProducerInterceptor, ProducerRecord
from sdk.producer.partitioner import DefaultPartitioner, Partitioner, make_partitioner
from sdk.producer.record_metadata import RecordMetadata
from sdk.producer.sender import Sender
from sdk.producer.transaction_manager import TransactionManager
from sdk.producer.transactions import TransactionalMixin, Transactions
from sdk.records import BATCH_OVERHEAD, RECORD_OVERHEAD, headers_size, record_size_bound

__all__ = ["PreparedRecord", "Producer"]

#: ``(topic, key, value, partition, timestamp_ms, headers)`` after interceptors and serializers.
PreparedRecord = tuple[str, "bytes | None", "bytes | None", "int | None", "int | None", "Headers | None"]

log = logging.getLogger(__name__)

_new_object = object.__new__


_NEW, _RUNNING, _CLOSING, _CLOSED = "new", "running", "closing", "closed"


class _StickyRoute:
    """Where a topic's keyless records go while nothing changes (``Producer._update_route``),
    and the one place such a record is appended (``append``).

    ``sticky`` is the DefaultPartitioner's state for the topic and ``batch`` the open batch of its
    partition; the route holds while ``cluster.version == version``, ``sticky.used_up`` is false
    and ``batch.full`` is false. ``cluster``, ``accumulator``, ``batch_size`` and the size bounds
    are constants kept here so the fast path reads one object.
    """

    __slots__ = (
        "accumulator",
        "batch",
        "batch_size",
        "buffer_memory",
        "cluster",
        "max_record_size",
        "sticky",
        "version",
    )

    def __init__(
        self, cluster: Any, accumulator: Any, batch_size: int, max_record_size: int, buffer_memory: int
    ) -> None:
        self.cluster = cluster
        self.accumulator = accumulator
        self.batch_size = batch_size
        self.max_record_size = max_record_size
        self.buffer_memory = buffer_memory
        self.sticky: Any = None
        self.batch: Any = None
        self.version = -1

    def append(
        self, value: bytes, timestamp_ms: int | None, future: LazyRecordFuture | None
    ) -> LazyRecordFuture | None:
        """Append a keyless record of bytes without headers to the route's batch and return its
        future (``future`` attached, or a new ``RecordFuture`` when None); None, with nothing
        changed, when the route no longer holds or memory is short: the caller then takes the
        general path. The per-record hot path: every test comes before any side effect, and the
        bookkeeping of the accumulator (memory), the batch (its futures and reserved bytes) and
        the DefaultPartitioner (sticky accounting, as ``partition_keyless`` does it) is written
        out here rather than called, which is a third of the cost of a record."""
        sticky = self.sticky
        batch = self.batch
        if sticky.used_up or batch.full or self.version != self.cluster.version:
            return None
        size = RECORD_OVERHEAD + len(value)
        acc = self.accumulator
        if size > self.max_record_size or acc.waiters or acc.used + size > self.buffer_memory:
            return None
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        delta = batch.builder.append(timestamp_ms, None, value)
        if delta is None:
            return None
        acc.used += size
        batch.reserved += size
        produced = sticky.produced + size
        sticky.produced = produced
        if produced >= self.batch_size:
            sticky.used_up = True
        if future is None:
            # RecordFuture(), its fields set here: cheaper than calling its constructor.
            future = _new_object(RecordFuture)
            future._callbacks = None
        else:
            batch.outcome.scan = True  # a DeliveryFuture (see BatchOutcome.scan)
        future._outcome = batch.outcome
        future._delta = delta
        future._timestamp = timestamp_ms
        future._key_size = -1
        future._value_size = size - RECORD_OVERHEAD
        batch.futures.append(future)
        return future


class Producer(BatchSendMixin, TransactionalMixin):
    """Send records to Kafka from asyncio code.

    ::

        async with Producer(bootstrap_servers="localhost:9092") as producer:
            metadata = await producer.send_and_wait("events", b"payload", key=b"user-1")

    Settings are keyword arguments (aiokafka's names where aiokafka has the setting, the Java
    client's otherwise); ``help(Producer.__init__)`` lists them with their defaults. aiokafka's
    options that mean nothing here (``api_version``, ``loop``, ``connections_max_idle_ms``,
    ``sasl_kerberos_*``) are accepted with a warning, ``max_batch_size`` as ``batch_size``.

    Errors (all subclasses of ``sdk.errors.KafkaError``):

    - ``ConfigError`` (also a ValueError): a bad or conflicting setting, raised by the constructor;
      ``.option`` names it.
    - ``NoBrokersAvailableError``: ``start()`` reached none of the bootstrap servers.
    - ``IllegalStateError``: ``send`` before ``start()``. ``ProducerClosedError`` (a subclass):
      ``send`` after ``stop()`` began, or records still unsent when ``stop(timeout)`` gave up.
    - ``SerializationError``: a serializer raised (the original is ``__cause__``), or a key/value is
      not bytes and no serializer is set. Raised by ``send``; nothing is sent.
    - ``RecordTooLargeError`` (a ``MessageTooLargeError``): the record is larger than
      ``max_request_size`` or ``buffer_memory``. Raised by ``send``.
    - ``InvalidPartitionError``: an explicit partition the topic does not have.
    - ``MetadataTimeoutError``: the topic did not appear in metadata within ``max_block_ms`` (e.g.
      it does not exist and the broker does not auto-create topics); ``.last_error`` holds what the
      broker said. Raised by ``send``/``partitions_for``.
    - ``BufferExhaustedError``: no room in ``buffer_memory`` within ``max_block_ms``. Raised by ``send``.
    - Delivery failures, through the future ``send`` returned: ``DeliveryTimeoutError`` (not
      acknowledged within ``delivery_timeout_ms``; the last broker error is ``__cause__``), or the
      broker's non-retriable error (e.g. ``TopicAuthorizationFailedError``,
      ``MessageTooLargeError``, ``InvalidRecordError``).
    - Transactions: ``IllegalStateError`` for a call in the wrong state (``send`` or
      ``commit_transaction`` outside a transaction, ``begin_transaction`` twice);
      ``TransactionAbortableError`` (cause: what failed) once a send or offset commit of the
      transaction failed, until ``abort_transaction()``; records dropped by an abort fail with
      ``TransactionAbortedError``; fatal errors (``FATAL_TRANSACTION_ERRORS``: ``ProducerFencedError``,
      ``TransactionalIdAuthorizationFailedError``, ...) leave only ``stop()``.
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str | list[str] = "localhost:9092",
        client_id: str | None = None,
        acks: int | str = "all",
        enable_idempotence: bool | None = None,
        compression_type: str | None = None,
        batch_size: int = 16384,
        linger_ms: float = 5,
        max_request_size: int = 1048576,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: float = 60000,
        request_timeout_ms: float = 30000,
        delivery_timeout_ms: float = 120000,
        retry_backoff_ms: float = 100,
        retry_backoff_max_ms: float = 1000,
        reconnect_backoff_ms: float = 50,
        reconnect_backoff_max_ms: float = 1000,
        connect_timeout_ms: float = 10000,
        max_in_flight_requests_per_connection: int = 5,
        partitioner: Partitioner | str | Callable[..., int] | None = None,
        interceptors: Iterable[ProducerInterceptor] = (),
        key_serializer: Callable[[Any], bytes | None] | None = None,
        value_serializer: Callable[[Any], bytes | None] | None = None,
        metadata_max_age_ms: float = 300000,
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        sasl_mechanism: str | SaslMechanism | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: float = 60000,
        enable_two_phase_commit: bool = False,
        **aiokafka_options: Any,
    ):
        """Validate the settings (``ConfigError`` naming the first bad one); connect in ``start()``.

        :param bootstrap_servers: ``"host:port,host:port"`` or a list: where to fetch metadata first.
        :param client_id: sent with every request (broker logs, quotas); default ``"sdk-producer"``.
        :param acks: ``0`` (no answer), ``1`` (the leader wrote it) or ``'all'``/``-1`` (every
            in-sync replica; the default, as in Kafka 3+).
        :param enable_idempotence: no duplicates from retries, per-partition order kept; None (the
            default) turns it on whenever ``acks='all'`` and at most 5 requests are in flight.
            True with other ``acks`` is a ``ConfigError``.
        :param compression_type: None, ``'gzip'``, ``'snappy'``, ``'lz4'`` or ``'zstd'``.
        :param batch_size: uncompressed bytes per partition batch (aiokafka: ``max_batch_size``).
        :param linger_ms: how long a batch waits for more records (5, Kafka 4's default; 0 for the
            lowest latency at low volume).
        :param max_request_size: bound of one Produce request, and so of one record.
        :param buffer_memory: bytes of records waiting to be acknowledged; when full, ``send``
            waits up to ``max_block_ms`` for room, then raises ``BufferExhaustedError``.
        :param max_block_ms: how long ``send`` may wait for room or for a topic's metadata.
        :param request_timeout_ms: how long to wait for a broker's answer before retrying.
        :param delivery_timeout_ms: a batch's whole budget from creation, retries included.
        :param retry_backoff_ms: first wait before retrying a failed request (exponential).
        :param retry_backoff_max_ms: the longest wait before a retry.
        :param reconnect_backoff_ms: first wait before reconnecting to a broker (exponential).
        :param reconnect_backoff_max_ms: the longest wait before reconnecting.
        :param connect_timeout_ms: how long a connection attempt (TCP, TLS, SASL) may take.
        :param max_in_flight_requests_per_connection: unanswered Produce requests per broker.
        :param partitioner: None/``'default'`` (Java's: murmur2 for keys, sticky without),
            ``'round_robin'``, ``'murmur2_random'`` (librdkafka's), a ``Partitioner``, or a callable
            ``(key_bytes, all_partitions, available_partitions) -> int``. An explicit partition wins.
        :param interceptors: ``ProducerInterceptor`` instances (``on_send``, ``on_acknowledgement``).
        :param key_serializer: callable turning a key into bytes; without it keys must be bytes.
        :param value_serializer: callable turning a value into bytes; without it values must be bytes.
        :param metadata_max_age_ms: metadata is refreshed at least this often.
        :param security_protocol: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
        :param ssl_context: TLS settings for ``SSL``/``SASL_SSL``.
        :param sasl_mechanism: ``'PLAIN'`` or a ``SaslMechanism`` instance.
        :param sasl_plain_username: user name for ``PLAIN``.
        :param sasl_plain_password: password for ``PLAIN``.
        :param transactional_id: makes the producer transactional (``sdk.producer.transactions``):
            ``start()`` runs ``init_transactions()`` (not with ``enable_two_phase_commit``),
            records are sent only inside a transaction
            (``begin_transaction()`` ... ``commit_transaction()``/``abort_transaction()``, or
            ``async with producer.transaction():``), offsets join it with
            ``send_offsets_to_transaction``.
        :param transaction_timeout_ms: how long the coordinator lets a transaction stay open before
            aborting it (sent with InitProducerId).
        :param enable_two_phase_commit: two-phase commit (KIP-939, needs ``transactional_id`` and a
            broker with ``transaction.two.phase.commit.enable``): transactions never time out and
            can be prepared (``prepare_transaction()``), kept by a successor and completed
            (``complete_transaction(state)``). ``start()`` then does not run
            ``init_transactions()``, which would abort a prepared transaction: call
            ``init_transactions(keep_prepared_transaction=...)`` yourself.
        :param aiokafka_options: aiokafka's options without a meaning here, accepted with a warning.
        """
        options = {
            name: value for name, value in locals().items() if name not in ("self", "aiokafka_options")
        }
        self.config = ProducerConfig.from_kwargs(**options, **aiokafka_options)
        cfg = self.config
        self._state = _NEW
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: KafkaClient | None = None
        self._accumulator: RecordAccumulator | None = None
        self._sender: Sender | None = None
        self._txn: TransactionManager | None = None
        self._transactions: Transactions | None = None
        self._partitioner = make_partitioner(cfg.partitioner, cfg.batch_size)
        self._interceptors = InterceptorChain(cfg.interceptors) if cfg.interceptors else None
        self._key_serializer = cfg.key_serializer
        self._value_serializer = cfg.value_serializer
        self._max_block_ms = cfg.max_block_ms
        self._max_request_size = cfg.max_request_size
        self._buffer_memory = cfg.buffer_memory
        self._yield_pending = False
        self._cluster: Any = None
        #: True while ``send`` may proceed: started, not stopping, sender not failed.
        self._accepting = False
        #: Largest record (framing included) allowed by max_request_size and buffer_memory.
        self._max_record_size = min(cfg.max_request_size - BATCH_OVERHEAD, cfg.buffer_memory)
        #: Nothing to serialize or intercept: ``send`` may take its fast path.
        self._plain = (
            self._interceptors is None and self._key_serializer is None and self._value_serializer is None
        )
        #: The partitioner when it is exactly the DefaultPartitioner, whose sticky state the
        #: fast path follows (a subclass may change the rules, so it always gets asked).
        self._sticky = self._partitioner if type(self._partitioner) is DefaultPartitioner else None
        #: Sticky routes for keyless records, per topic (see ``_update_route``).
        self._routes: dict[str, _StickyRoute] = {}

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster and start the sender. Raises ``NoBrokersAvailableError``."""
        if self._state != _NEW:
            raise IllegalStateError(f"producer already {self._state}")
        cfg = self.config
        self._loop = asyncio.get_running_loop()
        client = KafkaClient.from_config(cfg)
        await client.start()
        self._client = client
        self._cluster = client.cluster
        if cfg.idempotent:
            self._txn = TransactionManager(
                cfg.transactional_id,
                cfg.transaction_timeout_ms,
                two_phase_commit=cfg.enable_two_phase_commit,
            )
        self._accumulator = RecordAccumulator(
            batch_size=cfg.batch_size,
            linger_ms=cfg.linger_ms,
            compression=cfg.compression,
            buffer_memory=cfg.buffer_memory,
            delivery_timeout_ms=cfg.delivery_timeout_ms,
            retry_backoff=client.retry_backoff,
            max_in_flight_per_partition=cfg.max_in_flight_requests_per_connection,
        )
        self._sender = Sender(
            client,
            self._accumulator,
            self._txn,
            acks=cfg.acks_value,
            request_timeout_ms=cfg.request_timeout_ms,
            max_request_size=cfg.max_request_size,
            max_in_flight=cfg.max_in_flight_requests_per_connection,
            interceptors=self._interceptors,
        )
        self._accumulator.on_ready = self._sender.wake
        if cfg.transactional_id is not None:
            assert self._txn is not None
            self._transactions = Transactions(
                client, self._txn, self._accumulator, self._sender, max_block_ms=cfg.max_block_ms
            )
            self._txn.on_change = self._on_transaction_change
            self._sender.before_drain = self._transactions.poll
        self._sender.start()
        self._sender.on_fatal = self._stop_accepting
        self._state = _RUNNING
        self._accepting = True
        if self._transactions is not None:
            # As aiokafka does: a transactional producer is ready for begin_transaction() once
            # started. Not with two-phase commit: the caller decides whether a prepared
            # transaction is kept (init_transactions(keep_prepared_transaction=True)).
            self._on_transaction_change()
            if cfg.enable_two_phase_commit:
                return
            try:
                await self._transactions.init_transactions()
            except BaseException:
                await self.stop()
                raise

    def _on_transaction_change(self) -> None:
        """``send`` takes records only inside a transaction (``_check_running`` says why not)."""
        txn = self._txn
        assert txn is not None
        self._accepting = self._state == _RUNNING and txn.accepts_sends and txn.fatal_error is None
        if self._sender is not None:
            self._sender.wake()

    def _stop_accepting(self) -> None:
        self._accepting = False

    async def stop(self, timeout: float | None = None) -> None:
        """Deliver what is buffered, then close. With ``timeout`` (seconds), records still unsent
        then fail with ``ProducerClosedError``. Safe to call twice. A transactional producer
        aborts its open transaction first (as Java's producer does at close)."""
        if self._state in (_CLOSING, _CLOSED):
            return
        if self._state == _NEW:
            self._state = _CLOSED
            return
        self._state = _CLOSING
        self._accepting = False
        try:
            assert self._sender is not None and self._client is not None
            if self._transactions is not None:
                await self._transactions.abort_open_transaction(timeout)
            await self._sender.close(timeout)
        finally:
            if self._client is not None:
                await self._client.close()
            if self._interceptors is not None:
                self._interceptors.close()
            self._state = _CLOSED

    close = stop

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until each of those records is acknowledged or
        failed (the outcome is in each record's future)."""
        acc = self._accumulator
        if acc is None:
            return
        acc.begin_flush()
        try:
            await asyncio.wait_for(acc.wait_for_incomplete(), timeout)
        finally:
            acc.end_flush()

    @property
    def client(self) -> KafkaClient:
        if self._client is None:
            raise IllegalStateError("producer not started")
        return self._client

    @property
    def transaction_manager(self) -> TransactionManager | None:
        return self._txn

    def _check_running(self, sending: bool = True) -> None:
        if self._state != _RUNNING:
            if self._state == _NEW:
                raise IllegalStateError("producer not started: call await producer.start() first")
            raise ProducerClosedError(f"producer is {self._state}: cannot send")
        sender = self._sender
        if sender is not None and sender.fatal_error is not None:
            raise sender.fatal_error
        if sending and self._transactions is not None:
            self._transactions.txn.check_can_send()

    # -- metadata -------------------------------------------------------------------------------

    async def partitions_for(self, topic: str) -> set[int]:
        """The topic's partition ids (waits up to ``max_block_ms`` for its metadata)."""
        self._check_running(sending=False)
        meta = await self._wait_for_topic(topic, None, now_ms() + self._max_block_ms)
        return set(meta.partition_ids)

    async def _wait_for_topic(self, topic: str, partition: int | None, deadline: float) -> Any:
        client = self.client
        cluster = self._cluster
        client.add_topic(topic)
        refreshed = False
        while True:
            meta = cluster.topics.get(topic)
            error = cluster.topic_error(topic)
            if meta is not None and meta.partition_ids:
                if partition is None or partition in meta.partitions:
                    return meta
                if refreshed:
                    # Fresh metadata still lacks it: a wrong partition, not a stale cache.
                    raise InvalidPartitionError(
                        f"partition {partition} of {topic!r} does not exist "
                        f"(the topic has {len(meta.partition_ids)})"
                    )
            elif error is not None and not error.retriable:
                # A fresh instance per waiter: the cached one would collect every raiser's frames.
                raise make_error(error.code, f"topic {topic!r}")
            remaining = deadline - now_ms()
            if remaining <= 0:
                if meta is not None and meta.partition_ids and partition is not None:
                    raise InvalidPartitionError(
                        f"partition {partition} of {topic!r} does not exist "
                        f"(the topic has {len(meta.partition_ids)})"
                    )
                raise MetadataTimeoutError(
                    f"topic {topic!r} not present in metadata after {self._max_block_ms:.0f} ms"
                    + (f" (last error: {error})" if error is not None else ""),
                    topic=topic,
                    last_error=error,
                )
            update = client.request_metadata_update()
            try:
                async with asyncio.timeout(remaining / 1000):
                    await update
                refreshed = True
            except TimeoutError:
                pass

    # -- sending --------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> RecordFuture:
        """Queue a record; returns a future resolving to its ``RecordMetadata`` once acknowledged.

        Returns as soon as the record is in a batch; waits only for metadata of a new topic or
        for room in ``buffer_memory`` (both bounded by ``max_block_ms``). The future is a
        :class:`~sdk.producer.futures.RecordFuture`: asyncio-compatible (await it, gather it, add
        callbacks, cancel it), resolved with the rest of its batch in one step.
        """
        if not self._accepting:
            self._check_running()
        # The fast path: a keyless record of bytes, nothing to serialize or intercept, onto the
        # topic's sticky route. Anything else (or a route that no longer holds) takes the
        # general path.
        route = self._routes.get(topic) if self._plain else None
        if route is not None and key is None and partition is None and not headers and type(value) is bytes:
            future = route.append(value, timestamp_ms, None)
            if future is not None:
                return future  # type: ignore[return-value]  # a LazyRecordFuture serves as a RecordFuture
        elif (
            partition is not None
            and self._plain
            and not headers
            and type(value) is bytes
            and (key is None or type(key) is bytes)
        ):
            direct = self._append_to_open_batch(topic, partition, key, value, timestamp_ms)
            if direct is not None:
                return direct
        interceptors = self._interceptors
        if interceptors is not None:
            record = interceptors.on_send(ProducerRecord(topic, value, key, partition, timestamp_ms, headers))
            topic, value, key, partition, timestamp_ms, headers = record
        try:
            if self._key_serializer is not None or (key is not None and type(key) is not bytes):
                key = self._serialize_key(topic, key)
            if self._value_serializer is not None or (value is not None and type(value) is not bytes):
                value = self._serialize_value(topic, value)
            future = self.append_nowait((topic, key, value, partition, timestamp_ms, headers), None)
            if future is None:
                future = RecordFuture.detached()
                await self._append_blocking(topic, key, value, partition, timestamp_ms, headers, future)
        except KafkaError as exc:
            if interceptors is not None:
                failed = RecordMetadata(topic, -1 if partition is None else partition, -1, -1)
                interceptors.on_acknowledgement(failed, exc)
            raise
        if self._yield_pending:
            # A batch just filled up: let the sender put it on the wire while we keep producing.
            self._yield_pending = False
            await asyncio.sleep(0)
        return future  # type: ignore[return-value]  # a LazyRecordFuture serves as a RecordFuture

    def _append_to_open_batch(
        self, topic: str, partition: int, key: bytes | None, value: bytes, timestamp_ms: int | None
    ) -> RecordFuture | None:
        """The fast path of a record of bytes sent to a given partition (nothing to serialize,
        intercept or partition): it joins the partition's open batch if that has room and the
        memory is free without waiting. None, with nothing changed, sends it down the general
        path, which opens batches, waits for memory and checks that the partition exists (an
        open batch proves it does)."""
        acc = self._accumulator
        parts = acc.open.get(topic)  # type: ignore[union-attr]  # set once started
        batch = parts.get(partition) if parts is not None else None
        if batch is None or batch.full:
            return None
        key_size = -1 if key is None else len(key)
        size = RECORD_OVERHEAD + len(value) + (0 if key is None else key_size)
        if size > self._max_record_size or acc.waiters or acc.used + size > self._buffer_memory:  # type: ignore[union-attr]
            return None
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        delta = batch.builder.append(timestamp_ms, key, value)
        if delta is None:
            return None
        acc.used += size  # type: ignore[union-attr]
        future = _new_object(RecordFuture)
        future._callbacks = None
        batch.attach(future, delta, timestamp_ms, key_size, len(value), size)
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> RecordMetadata:
        """``send`` and wait for the acknowledgement."""
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    def _serialize_key(self, topic: str, key: Any) -> bytes | None:
        serializer = self._key_serializer
        if serializer is None:
            if isinstance(key, bytearray | memoryview):
                return bytes(key)
            raise SerializationError(
                f"key must be bytes or None without a key_serializer, not {type(key).__name__}"
            )
        try:
            return serializer(key)
        except Exception as exc:
            raise SerializationError(f"key_serializer failed for a record to {topic!r}: {exc!r}") from exc

    def _serialize_value(self, topic: str, value: Any) -> bytes | None:
        serializer = self._value_serializer
        if serializer is None:
            if isinstance(value, bytearray | memoryview):
                return bytes(value)
            raise SerializationError(
                f"value must be bytes or None without a value_serializer, not {type(value).__name__}"
            )
        try:
            return serializer(value)
        except Exception as exc:
            raise SerializationError(f"value_serializer failed for a record to {topic!r}: {exc!r}") from exc

    def _serialize(self, topic: str, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        """Key and value as bytes (for callers outside the hot path, e.g. the sync facade)."""
        if self._key_serializer is not None or (key is not None and type(key) is not bytes):
            key = self._serialize_key(topic, key)
        if self._value_serializer is not None or (value is not None and type(value) is not bytes):
            value = self._serialize_value(topic, value)
        return key, value

    def _record_size(self, key: bytes | None, value: bytes | None, headers: Headers | None) -> int:
        """Bytes a record can take in a batch (Kafka's upper bound); raises if it can never fit."""
        size = record_size_bound(key, value, headers)
        if size > self._max_record_size:
            self._too_large(size)
        return size

    def _too_large(self, size: int) -> None:
        if size + BATCH_OVERHEAD > self._max_request_size:
            raise RecordTooLargeError(
                f"the record is {size + BATCH_OVERHEAD} bytes serialized, larger than "
                f"max_request_size ({self._max_request_size})"
            )
        raise RecordTooLargeError(
            f"the record is {size} bytes serialized, larger than buffer_memory ({self._buffer_memory})"
        )

    def append_nowait(
        self, record: PreparedRecord, future: LazyRecordFuture | None
    ) -> LazyRecordFuture | None:
        """Append a prepared record (``prepare_record``) if that needs no waiting, and return its
        future: ``future`` attached to its batch, or a new ``RecordFuture`` when None. None, with
        nothing done, when the topic's metadata or room in ``buffer_memory`` is missing (then
        ``append`` waits for them). Loop thread only; facades call it once per record."""
        topic, key, value, partition, timestamp_ms, headers = record
        route = self._routes.get(topic)
        if route is not None and key is None and partition is None and not headers and type(value) is bytes:
            appended = route.append(value, timestamp_ms, future)
            if appended is not None:
                return appended
        meta = self._cluster.topics.get(topic)
        if meta is None or not meta.partition_ids:
            return None
        size = record_size_bound(key, value, headers)
        if size > self._max_record_size:
            self._too_large(size)
        if partition is not None and partition not in meta.partitions:
            if partition < 0:
                raise InvalidPartitionError(f"partition {partition} is negative")
            return None
        if not self._accumulator.try_reserve(size):  # type: ignore[union-attr]  # set once started
            return None
        if future is None:
            future = RecordFuture.detached()
        self._append_reserved(topic, key, value, partition, timestamp_ms, headers, future, size, meta)
        return future

    def _append_reserved(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        timestamp_ms: int | None,
        headers: Headers | None,
        future: LazyRecordFuture,
        size: int,
        meta: Any,
    ) -> None:
        """The general path's last step, for a record whose memory is reserved: pick its
        partition, append it (the accumulator keeps the books), and remember the sticky route
        that the next keyless records of the topic can take."""
        keyless = False
        if partition is None:
            if key is None:
                partition = self._partitioner.partition_keyless(
                    topic, meta.partition_ids, meta.available, size
                )
                keyless = True
            else:
                partition = self._partitioner.partition(topic, key, meta.partition_ids, meta.available)
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        acc = self._accumulator
        assert acc is not None
        if acc.append(topic, partition, timestamp_ms, key, value, headers, future, size):
            self._yield_pending = True
        if keyless and self._sticky is not None and not headers and type(value) is bytes:
            self._update_route(topic, partition, acc.open.get(topic, {}).get(partition))

    # -- the entry point for facades (sdk.sync) ------------------------------------------------

    def prepare_record(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> PreparedRecord:
        """Check that the producer accepts records, run the interceptors' ``on_send`` and the
        serializers, and refuse a record that can never fit. Safe to call from any thread (it
        touches no loop state), so a facade does this work on its caller's thread.

        Returns ``(topic, key, value, partition, timestamp_ms, headers)`` for ``append_nowait`` /
        ``append``."""
        if not self._accepting:
            self._check_running()
        interceptors = self._interceptors
        if interceptors is not None:
            record = interceptors.on_send(ProducerRecord(topic, value, key, partition, timestamp_ms, headers))
            topic, value, key, partition, timestamp_ms, headers = record
        if (
            not self._plain
            or (key is not None and type(key) is not bytes)
            or (value is not None and type(value) is not bytes)
        ):
            key, value = self._serialize(topic, key, value)
        # record_size_bound, inlined (once per record).
        size = RECORD_OVERHEAD
        if key is not None:
            size += len(key)
        if value is not None:
            size += len(value)
        if headers:
            size += headers_size(headers)
        if size > self._max_record_size:
            self._too_large(size)
        return (topic, key, value, partition, timestamp_ms, headers)

    async def append(self, record: PreparedRecord, future: LazyRecordFuture) -> None:
        """Append a prepared record, waiting (up to ``max_block_ms``) for metadata and memory."""
        if self.append_nowait(record, future) is None:
            await self._append_blocking(*record, future)

    def _update_route(self, topic: str, partition: int, batch: ProducerBatch | None) -> None:
        """Remember (or forget) the topic's sticky route after a keyless record went through the
        general path: the DefaultPartitioner's current sticky partition and the batch open there.
        ``send`` then appends the next keyless records without asking the partitioner or the
        accumulator, for as long as the route holds: same metadata version, sticky partition
        not used up (a switch marks the old one used up), batch not sealed."""
        sticky = self._sticky.sticky(topic)  # type: ignore[union-attr]  # only called with a DefaultPartitioner
        if batch is None or batch.full or sticky is None or sticky.used_up or sticky.partition != partition:
            self._routes.pop(topic, None)
            return
        route = self._routes.get(topic)
        if route is None:
            batch_size = self._sticky.batch_size  # type: ignore[union-attr]  # as above
            route = self._routes[topic] = _StickyRoute(
                self._cluster, self._accumulator, batch_size, self._max_record_size, self._buffer_memory
            )
        route.sticky = sticky
        route.batch = batch
        route.version = self._cluster.version

    async def _append_blocking(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        timestamp_ms: int | None,
        headers: Headers | None,
        future: LazyRecordFuture,
    ) -> None:
        """The slow path: wait for the topic's metadata and for memory, then append (``future``
        is attached to the record's batch)."""
        deadline = now_ms() + self._max_block_ms
        await self._wait_for_topic(topic, partition, deadline)
        size = self._record_size(key, value, headers)
        acc = self._accumulator
        assert acc is not None
        await acc.reserve(size, max(0.0, deadline - now_ms()))
        self._check_running_after_wait(size)
        self._append_reserved(
            topic, key, value, partition, timestamp_ms, headers, future, size, self._cluster.topics[topic]
        )

    def _check_running_after_wait(self, reserved: int) -> None:
        try:
            self._check_running()
        except BaseException:
            assert self._accumulator is not None
            self._accumulator.release(reserved)
            raise

    def __repr__(self) -> str:
        return f"<Producer {self._state} bootstrap={self.config.bootstrap_servers!r}>"
