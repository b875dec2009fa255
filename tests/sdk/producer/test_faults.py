"""Idempotent delivery through faults: connections cut mid-request, responses lost, a broker
killed and restarted. Afterwards every partition must hold exactly what was sent to it, in order:
no duplicate, no gap.

librdkafka's mock cluster checks sequence numbers only for transactional producers (see
``rd_kafka_mock_validate_records``: it returns early without a TransactionalId), so it writes the
resend of a batch whose response was lost a second time. Against the mock these tests therefore
check no loss and order (each record's first copy in place, any extra copy a whole resent batch);
the reference broker, which deduplicates like Kafka, gets the full exactly-once check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sdk import Producer
from sdk.errors import MessageTooLargeError


def _assert_exactly_once_in_order(sent_by_partition, consumed, group_by_partition, deduplicating=True):
    got = {p: [r.value for r in records] for p, records in group_by_partition(consumed).items()}
    if not deduplicating:
        got = {p: _first_copies(values) for p, values in got.items()}
    for partition, values in sent_by_partition.items():
        assert len(got.get(partition, [])) == len(values), (
            f"partition {partition}: {len(got.get(partition, []))} records, expected {len(values)}"
        )
        assert got.get(partition, []) == values
    assert set(got) <= set(sent_by_partition)


def _first_copies(values):
    seen = set()
    first = []
    for value in values:
        if value not in seen:
            seen.add(value)
            first.append(value)
    return first


async def _send_loop(producer, topic, count, delay_every=50, min_duration_s=0.0, all_sent=None):
    """Keyed records (all 4 partitions), each value numbered; returns values by partition.

    With ``min_duration_s`` the sends are paced to last at least that long, so faults injected on
    a timer hit the loop however fast the machine is. ``all_sent`` (an event) is set once every
    record is handed to the producer, before their acknowledgements are awaited.
    """
    loop = asyncio.get_running_loop()
    start = loop.time()
    futures = []
    for i in range(count):
        key = f"key-{i % 16}".encode()
        futures.append((i, await producer.send(topic, f"{i:06d}".encode(), key=key)))
        if i % delay_every == 0:
            due = start + min_duration_s * i / count
            await asyncio.sleep(max(0.002, due - loop.time()))
    if all_sent is not None:
        all_sent.set()
    sent: dict[int, list[bytes]] = {}
    for i, future in futures:
        md = await future
        sent.setdefault(md.partition, []).append(f"{i:06d}".encode())
    return sent


async def _chaos(proxy, stop: asyncio.Event):
    """Every 60 ms one fault: cut everything, cut after 3000 more bytes, or drop the next Produce
    response. Drops do not pile up: while a partition retries, the producer sends one batch at a
    time, and a backlog of drops would swallow every answer it gets.

    Faults stop at ``stop``: on a machine loaded enough that a retry's reconnect and round trip
    take longer than 60 ms, faults without end would cut every attempt (no broker fails like that),
    and the producer could only wait out its delivery timeout."""
    step = 0
    while not stop.is_set():
        await asyncio.sleep(0.06)
        step += 1
        if step % 3 == 0:
            proxy.cut_all()
        elif step % 3 == 1:
            proxy.cut_after_bytes(3000)
        elif not proxy.produce_responses_to_drop:
            proxy.drop_next_produce_responses(1)


async def test_connections_cut_mid_request_keep_order_without_duplicates(
    kafka, consume, proxy_factory, topic_name, group_by_partition
):
    topic = await kafka.create_topic(topic_name)
    proxy = await proxy_factory(kafka.bootstrap)
    stop = asyncio.Event()
    async with Producer(
        bootstrap_servers=proxy.bootstrap,
        linger_ms=2,
        batch_size=2048,
        retry_backoff_ms=20,
        reconnect_backoff_ms=10,
        request_timeout_ms=5000,
    ) as producer:
        chaos = asyncio.create_task(_chaos(proxy, stop))
        try:
            # Faults for as long as records are being sent; the last ones are acknowledged after.
            sent = await _send_loop(producer, topic, 3000, min_duration_s=1.0, all_sent=stop)
        finally:
            stop.set()
            await chaos
        txn = producer.transaction_manager
        assert txn is not None and txn.producer_id >= 0
    assert proxy.cuts >= 3, "the chaos did not cut anything"
    consumed = await consume(kafka.bootstrap, topic, expected=3000)
    _assert_exactly_once_in_order(sent, consumed, group_by_partition, kafka.kind != "mock")


async def test_lost_produce_responses_are_deduplicated(
    kafka, consume, proxy_factory, topic_name, group_by_partition
):
    topic = await kafka.create_topic(topic_name)
    proxy = await proxy_factory(kafka.bootstrap)
    async with Producer(
        bootstrap_servers=proxy.bootstrap, linger_ms=1, retry_backoff_ms=10, reconnect_backoff_ms=10
    ) as producer:
        proxy.drop_next_produce_responses(3)
        sent = await _send_loop(producer, topic, 400, delay_every=20)
    consumed = await consume(kafka.bootstrap, topic, expected=400)
    _assert_exactly_once_in_order(sent, consumed, group_by_partition, kafka.kind != "mock")


async def test_broker_killed_and_restarted_during_send_loop(
    broker_factory, consume, topic_name, group_by_partition, caplog
):
    caplog.set_level(logging.INFO, logger="sdk.client.client")
    broker = broker_factory({"num.partitions": 4})
    async with Producer(
        bootstrap_servers=broker.bootstrap,
        linger_ms=2,
        batch_size=4096,
        retry_backoff_ms=50,
        reconnect_backoff_ms=20,
        reconnect_backoff_max_ms=200,
        request_timeout_ms=3000,
    ) as producer:
        await producer.send_and_wait(topic_name, b"warm-up", key=b"key-0")
        first_pid = broker.pid

        async def crash():
            await asyncio.sleep(0.4)
            await asyncio.to_thread(broker.kill)
            await asyncio.sleep(0.3)
            await asyncio.to_thread(broker.start)

        crasher = asyncio.create_task(crash())
        try:
            sent = await _send_loop(producer, topic_name, 4000, delay_every=20, min_duration_s=3.0)
            assert crasher.done(), "the send loop ended before the broker came back"
        finally:
            with contextlib.suppress(Exception):
                await crasher
    assert broker.pid != first_pid, "the broker was not restarted"
    assert "closed" in caplog.text  # the producer saw its connection die
    consumed = await consume(broker.bootstrap, topic_name, expected=4001)
    values = [r for r in consumed if r.value != b"warm-up"]
    _assert_exactly_once_in_order(sent, values, group_by_partition)


async def test_broker_size_limit_splits_the_batch_and_the_producer_recovers(
    broker_factory, consume, topic_name
):
    # The broker accepts smaller batches than the producer builds: the rejected batch is halved
    # until only the oversized record fails; its sequence gap is closed by a new epoch/producer id.
    broker = broker_factory({"message.max.bytes": 2000, "num.partitions": 1})
    async with Producer(bootstrap_servers=broker.bootstrap, linger_ms=20) as producer:
        await producer.send_and_wait(topic_name, b"first")
        futures = [await producer.send(topic_name, b"small-%d" % i) for i in range(6)]
        big = await producer.send(topic_name, b"x" * 3000)
        futures += [await producer.send(topic_name, b"after-%d" % i) for i in range(6)]
        results = await asyncio.gather(*futures, big, return_exceptions=True)
        assert all(not isinstance(r, BaseException) for r in results[:-1])
        assert isinstance(results[-1], MessageTooLargeError)
        assert (await producer.send_and_wait(topic_name, b"last")).offset == 13
        txn = producer.transaction_manager
        assert txn is not None and txn.epoch_bumps == 1
    consumed = await consume(broker.bootstrap, topic_name, partitions=1, expected=14)
    assert [r.value for r in consumed] == (
        [b"first"] + [b"small-%d" % i for i in range(6)] + [b"after-%d" % i for i in range(6)] + [b"last"]
    )


async def test_not_leader_answers_trigger_a_metadata_refresh(
    mock_cluster, consume, proxy_factory, topic_name, group_by_partition, caplog
):
    caplog.set_level(logging.DEBUG, logger="sdk.producer.sender")
    proxy = await proxy_factory(mock_cluster.bootstrap)
    async with Producer(bootstrap_servers=proxy.bootstrap, linger_ms=0, retry_backoff_ms=20) as producer:
        await producer.partitions_for(topic_name)
        proxy.misroute_leaders(1)
        await producer.client.refresh_metadata()  # the client now believes the wrong leaders
        before = proxy.metadata_responses
        sent = await _send_loop(producer, topic_name, 200, delay_every=10)
        assert "NOT_LEADER_OR_FOLLOWER" in caplog.text  # the real broker said so
        assert proxy.metadata_responses > before  # and that made the client refresh
    consumed = await consume(mock_cluster.bootstrap, topic_name, expected=200)
    _assert_exactly_once_in_order(sent, consumed, group_by_partition)


async def test_rejected_batches_answered_late_are_not_overtaken_by_new_ones(
    kafka, consume, proxy_factory, topic_name
):
    # The first Produce request to partition 0 is answered NOT_LEADER_OR_FOLLOWER (50 ms late, so
    # more batches follow it), and so is every batch behind it until its retry arrives; those
    # later rejections reach the client 300 ms after that. Meanwhile the retried first batch is
    # written: a batch drained after it must wait for the late-rejected ones, or a broker that
    # does not check sequences (librdkafka's mock) stores it before them.
    topic = await kafka.create_topic(topic_name)
    proxy = await proxy_factory(kafka.bootstrap)
    # One record per batch: every send creates a batch and wakes the sender.
    async with Producer(
        bootstrap_servers=proxy.bootstrap, linger_ms=0, batch_size=1, retry_backoff_ms=20
    ) as producer:
        await producer.send_and_wait(topic, b"warm-up", partition=0)
        proxy.not_leader_windows(1, first_hold_s=0.05, hold_s=0.3)
        futures = []
        for i in range(80):  # a batch every 15 ms: a few in flight, requests to spare
            futures.append(await producer.send(topic, b"%06d" % i, partition=0))
            await asyncio.sleep(0.015)
        await asyncio.gather(*futures)
    assert proxy.not_leader_answers >= 2, "no batch was rejected behind the first one"
    consumed = await consume(kafka.bootstrap, topic, expected=81)
    values = [r.value for r in sorted(consumed, key=lambda r: r.offset) if r.partition == 0]
    assert values == [b"warm-up"] + [b"%06d" % i for i in range(80)]


async def test_a_batch_for_the_new_leader_waits_for_the_old_leaders_answer(
    mock_cluster, consume, proxy_factory, topic_name
):
    # The client sends the first batch to the wrong broker, whose NOT_LEADER_OR_FOLLOWER answer is
    # slow; meanwhile it learns the real leader. The next batch must not go there before the
    # first one is retried, or the real leader writes it first.
    proxy = await proxy_factory(mock_cluster.bootstrap)
    async with Producer(bootstrap_servers=proxy.bootstrap, linger_ms=0, retry_backoff_ms=20) as producer:
        await producer.partitions_for(topic_name)
        proxy.misroute_leaders(1)
        await producer.client.refresh_metadata()  # the client now believes the wrong leaders
        proxy.hold_next_produce_answers(1, 0.5)
        first = await producer.send(topic_name, b"first", partition=0)
        await producer.client.refresh_metadata()  # and now the right ones
        second = await producer.send(topic_name, b"second", partition=0)
        await asyncio.gather(first, second)
        assert proxy.metadata_responses >= 3
    consumed = await consume(mock_cluster.bootstrap, topic_name, expected=2)
    assert [r.value for r in sorted(consumed, key=lambda r: r.offset) if r.partition == 0] == [
        b"first",
        b"second",
    ]


async def test_a_first_batch_answered_not_leader_is_not_overtaken_by_the_next(
    kafka, consume, proxy_factory, topic_name
):
    # Apache Kafka names a new partition's leader in Metadata a moment before that broker serves
    # it, and a leader with no state of a producer id takes whatever sequence comes first. The
    # first Produce request is answered NOT_LEADER_OR_FOLLOWER (200 ms late, so batches queue
    # behind it) and everything after it goes through: a second batch sent beside the first
    # would be written ahead of it (the mock and Kafka store it; Kafka then refuses the retried
    # first batch with OUT_OF_ORDER_SEQUENCE_NUMBER until the delivery timeout).
    topic = await kafka.create_topic(topic_name)
    proxy = await proxy_factory(kafka.bootstrap)
    async with Producer(
        bootstrap_servers=proxy.bootstrap, linger_ms=0, batch_size=1, retry_backoff_ms=20,
        delivery_timeout_ms=30000, request_timeout_ms=10000,
    ) as producer:
        await producer.partitions_for(topic)
        proxy.not_leader_once(1, hold_s=0.2)
        futures = []
        for i in range(40):
            futures.append(await producer.send(topic, b"%06d" % i, partition=0))
            await asyncio.sleep(0.01)
        await asyncio.gather(*futures)
    assert proxy.not_leader_answers >= 1
    consumed = await consume(kafka.bootstrap, topic, expected=40)
    values = [r.value for r in sorted(consumed, key=lambda r: r.offset) if r.partition == 0]
    assert values == [b"%06d" % i for i in range(40)]
