"""The asyncio Producer (aiokafka-style API, Java-client semantics)."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Iterable
from typing import Any

from sdk.client.client import KafkaClient
from sdk.client.sasl import SaslMechanism
from sdk.errors import (
    IllegalStateError,
    InvalidPartitionError,
    KafkaError,
    MetadataTimeoutError,
    ProducerClosedError,
    SerializationError,
    make_error,
)
from sdk.metrics.core import MetricName, Metrics, monotonic_ms
from sdk.metrics.producer import ProducerMetrics
from sdk.producer.accumulator import RecordAccumulator, now_ms
from sdk.producer.batch import BatchSink
from sdk.producer.batch_api import BatchSendMixin, Headers
from sdk.producer.config import ProducerConfig
from sdk.producer.futures import LazyRecordFuture, RecordFuture
from sdk.producer.interceptors import InterceptorChain, ProducerInterceptor, ProducerRecord
from sdk.producer.network_port import ClientProducerPort
from sdk.producer.partitioner import Partitioner, make_partitioner
from sdk.producer.record_metadata import RecordMetadata
from sdk.producer.sender import Sender
from sdk.producer.transaction_api import TransactionalMixin
from sdk.producer.transaction_manager import TransactionManager
from sdk.producer.transaction_operations import Transactions

__all__ = ["Producer"]

#: ``(topic, partition, key, value, headers, timestamp_ms, size)`` after interceptors and
#: serializers, in ``try_append``'s order (``size`` from ``RecordAccumulator.record_size``).
PreparedRecord = tuple[str, "int | None", "bytes | None", "bytes | None", "Headers | None", "int | None", int]

log = logging.getLogger(__name__)

_NEW, _RUNNING, _CLOSING, _CLOSED = "new", "running", "closing", "closed"


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
        bootstrap_servers: str | list[str] = ProducerConfig.bootstrap_servers,
        client_id: str | None = ProducerConfig.client_id,
        acks: int | str = ProducerConfig.acks,
        enable_idempotence: bool | None = ProducerConfig.enable_idempotence,
        compression_type: str | None = ProducerConfig.compression_type,
        batch_size: int = ProducerConfig.batch_size,
        linger_ms: float = ProducerConfig.linger_ms,
        max_request_size: int = ProducerConfig.max_request_size,
        buffer_memory: int = ProducerConfig.buffer_memory,
        max_block_ms: float = ProducerConfig.max_block_ms,
        request_timeout_ms: float = ProducerConfig.request_timeout_ms,
        delivery_timeout_ms: float = ProducerConfig.delivery_timeout_ms,
        retry_backoff_ms: float = ProducerConfig.retry_backoff_ms,
        retry_backoff_max_ms: float = ProducerConfig.retry_backoff_max_ms,
        reconnect_backoff_ms: float = ProducerConfig.reconnect_backoff_ms,
        reconnect_backoff_max_ms: float = ProducerConfig.reconnect_backoff_max_ms,
        connect_timeout_ms: float = ProducerConfig.connect_timeout_ms,
        max_in_flight_requests_per_connection: int = ProducerConfig.max_in_flight_requests_per_connection,
        partitioner: Partitioner | str | Callable[..., int] | None = ProducerConfig.partitioner,
        interceptors: Iterable[ProducerInterceptor] = ProducerConfig.interceptors,
        key_serializer: Callable[[Any], bytes | None] | None = ProducerConfig.key_serializer,
        value_serializer: Callable[[Any], bytes | None] | None = ProducerConfig.value_serializer,
        metadata_max_age_ms: float = ProducerConfig.metadata_max_age_ms,
        security_protocol: str = ProducerConfig.security_protocol,
        ssl_context: ssl.SSLContext | None = ProducerConfig.ssl_context,
        sasl_mechanism: str | SaslMechanism | None = ProducerConfig.sasl_mechanism,
        sasl_plain_username: str | None = ProducerConfig.sasl_plain_username,
        sasl_plain_password: str | None = ProducerConfig.sasl_plain_password,
        sasl_oauth_token_provider: Any = ProducerConfig.sasl_oauth_token_provider,
        transactional_id: str | None = ProducerConfig.transactional_id,
        transaction_timeout_ms: float = ProducerConfig.transaction_timeout_ms,
        enable_two_phase_commit: bool = ProducerConfig.enable_two_phase_commit,
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
        :param sasl_oauth_token_provider: OAUTHBEARER's token provider (a ``token()`` coroutine).
        :param transactional_id: makes the producer transactional (``sdk.producer.transaction_operations``):
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
        self._cluster: Any = None
        self._metrics = ProducerMetrics(cfg.effective_client_id, monotonic_ms)
        #: True while ``send`` may proceed: started, not stopping, sender not failed.
        self._accepting = False
        #: Nothing to serialize or intercept: ``send`` goes straight to the accumulator.
        self._plain = (
            self._interceptors is None and self._key_serializer is None and self._value_serializer is None
        )

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
            cluster=self._cluster,
            partitioner=self._partitioner,
            max_request_size=cfg.max_request_size,
        )
        port = ClientProducerPort(client)
        self._sender = Sender(
            port,
            self._accumulator,
            self._txn,
            acks=cfg.acks_value,
            request_timeout_ms=cfg.request_timeout_ms,
            max_request_size=cfg.max_request_size,
            max_in_flight=cfg.max_in_flight_requests_per_connection,
            interceptors=self._interceptors,
            metrics=self._metrics,
        )
        self._accumulator.on_ready = self._sender.wake
        acc, sender = self._accumulator, self._sender
        self._metrics.bind(
            buffer_total=lambda: float(acc.buffer_memory),
            buffer_available=lambda: float(acc.buffer_memory - acc.used),
            waiting=lambda: float(len(acc.waiters)),
            in_flight=lambda: float(sender.requests_in_flight),
        )
        if cfg.transactional_id is not None:
            assert self._txn is not None
            self._transactions = Transactions(
                port, self._txn, self._accumulator, self._sender, max_block_ms=cfg.max_block_ms
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
                with self._metrics.timed("txn-init"):
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
            with self._metrics.timed("flush"):
                await asyncio.wait_for(acc.wait_for_incomplete(), timeout)
        finally:
            acc.end_flush()

    @property
    def metrics_registry(self) -> Metrics:
        """The registry behind ``metrics()`` (for exporters: ``sdk.metrics.opentelemetry``)."""
        return self._metrics.registry

    def metrics(self) -> dict[MetricName, float]:
        """The producer's metrics now, ``{MetricName: value}`` (Java's ``producer-metrics``
        names: ``record-send-rate``, ``request-latency-avg``, ``buffer-available-bytes``, ...;
        tagged ``client-id``). ``sdk.metrics.find_metric(producer.metrics(), "record-send-total")``
        picks one. Safe to call from any thread."""
        return self._metrics.registry.metrics()

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
        acc = self._accumulator
        if self._plain and (key is None or type(key) is bytes) and (value is None or type(value) is bytes):
            # Nothing to intercept or serialize: straight to the accumulator.
            future = acc.try_append(topic, partition, key, value, headers, timestamp_ms, None)  # type: ignore[union-attr]  # set once started
            if future is None:
                future = RecordFuture.detached()
                await self._append_waiting(topic, partition, key, value, headers, timestamp_ms, future)
        else:
            future = await self._send_prepared(topic, value, key, partition, timestamp_ms, headers)
        if acc.filled:  # type: ignore[union-attr]
            # A batch just filled up: let the sender put it on the wire while we keep producing.
            acc.filled = False  # type: ignore[union-attr]
            await asyncio.sleep(0)
        return future  # type: ignore[return-value]  # a LazyRecordFuture serves as a RecordFuture

    async def _send_prepared(
        self, topic: str, value: Any, key: Any, partition: int | None, timestamp_ms: int | None, headers: Any
    ) -> LazyRecordFuture:
        """``send`` for a record to intercept or serialize first; a failure is reported to the
        interceptors' ``on_acknowledgement`` too."""
        interceptors = self._interceptors
        if interceptors is not None:
            record = interceptors.on_send(ProducerRecord(topic, value, key, partition, timestamp_ms, headers))
            topic, value, key, partition, timestamp_ms, headers = record
        acc = self._accumulator
        assert acc is not None
        try:
            key, value = self._serialize(topic, key, value)
            future = acc.try_append(topic, partition, key, value, headers, timestamp_ms, None)
            if future is None:
                future = RecordFuture.detached()
                await self._append_waiting(topic, partition, key, value, headers, timestamp_ms, future)
        except KafkaError as exc:
            if interceptors is not None:
                failed = RecordMetadata(topic, -1 if partition is None else partition, -1, -1)
                interceptors.on_acknowledgement(failed, exc)
            raise
        return future  # type: ignore[return-value]  # None of the future given, never a sink

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

    def _serialize(self, topic: str, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        """Key and value as bytes: through the serializers when set, bytes-like objects copied,
        anything else a ``SerializationError``."""
        if self._key_serializer is not None or (key is not None and type(key) is not bytes):
            key = _serialize_one(self._key_serializer, "key", topic, key)
        if self._value_serializer is not None or (value is not None and type(value) is not bytes):
            value = _serialize_one(self._value_serializer, "value", topic, value)
        return key, value

    def _prepare_record(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        timestamp_ms: int | None,
        headers: Headers | None,
    ) -> PreparedRecord:
        """For the sync facade, on its caller's thread (it touches no loop state): check that the
        producer accepts records, run the interceptors' ``on_send`` and the serializers, and size
        the record (``RecordTooLargeError`` if it can never fit). The result goes to the
        accumulator's ``try_append`` on the loop thread, or to ``_append_waiting``."""
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
        size = self._accumulator.record_size(key, value, headers)  # type: ignore[union-attr]  # set once started
        return (topic, partition, key, value, headers, timestamp_ms, size)

    async def _append_waiting(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp_ms: int | None,
        future: LazyRecordFuture | BatchSink,
        size: int = -1,
    ) -> None:
        """The slow path of ``try_append``: wait (up to ``max_block_ms``) for the topic's metadata
        and for memory, then append (``future`` is attached to the record's batch)."""
        deadline = now_ms() + self._max_block_ms
        acc = self._accumulator
        assert acc is not None
        if size < 0:
            size = acc.record_size(key, value, headers)
        while True:
            await self._wait_for_topic(topic, partition, deadline)
            waited_from = time.perf_counter_ns()
            try:
                await acc.reserve(size, max(0.0, deadline - now_ms()))
            finally:
                # Near zero when memory was free; the slow path only, never a plain send.
                self._metrics.buffer_wait.record(float(time.perf_counter_ns() - waited_from))
            self._check_running_after_wait(size)
            try:
                appended = acc.try_append(
                    topic, partition, key, value, headers, timestamp_ms, future, size, reserved=True
                )
            except BaseException:
                acc.release(size)
                raise
            if appended is not None:
                return
            acc.release(size)  # the metadata lost the topic or partition meanwhile: wait again

    def _check_running_after_wait(self, reserved: int) -> None:
        try:
            self._check_running()
        except BaseException:
            assert self._accumulator is not None
            self._accumulator.release(reserved)
            raise

    def __repr__(self) -> str:
        return f"<Producer {self._state} bootstrap={self.config.bootstrap_servers!r}>"


def _serialize_one(
    serializer: Callable[[Any], bytes | None] | None, what: str, topic: str, obj: Any
) -> bytes | None:
    """``obj`` (a key or a value, named by ``what``) as bytes, or ``SerializationError``."""
    if serializer is None:
        if isinstance(obj, bytearray | memoryview):
            return bytes(obj)
        raise SerializationError(
            f"{what} must be bytes or None without a {what}_serializer, not {type(obj).__name__}"
        )
    try:
        return serializer(obj)
    except Exception as exc:
        raise SerializationError(f"{what}_serializer failed for a record to {topic!r}: {exc!r}") from exc
