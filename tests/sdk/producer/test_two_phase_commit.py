"""Two-phase commit (KIP-939) against the reference broker (``transaction.two.phase.commit.enable``
is on in its test defaults): a producer prepares a transaction and dies or closes without ending
it; a successor with the same transactional id keeps it (``keep_prepared_transaction``), which
fences the first, and completes it: committed when the stored state names it, aborted otherwise.
confluent-kafka's read_committed consumer is the oracle: the prepared records are invisible until
the completion, then visible exactly once (or never)."""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
from collections.abc import Iterator

import pytest

from reference_broker.testing import BrokerProcess
from sdk import PreparedTxnState, Producer
from sdk.errors import IllegalStateError, ProducerFencedError
from sdk.producer.transaction_manager import TransactionState
from sdk.sync import Producer as SyncProducer
from tests.sdk.producer.txn_helpers import TXN_BROKER, create_topic, read_committed, txn_producer, unique


@pytest.fixture(scope="module")
def tpc_broker() -> Iterator[BrokerProcess]:
    with BrokerProcess(config=TXN_BROKER) as proc:
        yield proc


def _tpc_producer(bootstrap: str, transactional_id: str) -> Producer:
    return txn_producer(bootstrap, transactional_id, enable_two_phase_commit=True)


async def _prepare(
    bootstrap: str, transactional_id: str, topic: str, count: int
) -> tuple[Producer, PreparedTxnState]:
    """A started producer whose transaction of ``count`` records is prepared."""
    producer = _tpc_producer(bootstrap, transactional_id)
    await producer.start()
    await producer.init_transactions()
    await producer.begin_transaction()
    for i in range(count):
        await producer.send(topic, b"prepared-%d" % i, partition=i % 2)
    state = await producer.prepare_transaction()
    txn = producer.transaction_manager
    assert txn is not None and txn.state == TransactionState.PREPARED
    assert state == PreparedTxnState(txn.producer_id, txn.producer_epoch)
    assert producer.prepared_transaction_state == state
    return producer, state


async def _nothing_visible(bootstrap: str, topic: str) -> None:
    assert await asyncio.to_thread(read_committed, bootstrap, topic, 0, 2, 1.5) == []


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from sdk import Producer

    async def main(bootstrap, transactional_id, topic, count):
        producer = Producer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                            enable_two_phase_commit=True, request_timeout_ms=10000)
        await producer.start()
        await producer.init_transactions()
        await producer.begin_transaction()
        for i in range(count):
            await producer.send(topic, b"prepared-%d" % i, partition=i % 2)
        state = await producer.prepare_transaction()
        print(state, flush=True)
        await asyncio.sleep(3600)  # killed here

    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
    """
)


async def test_a_successor_commits_the_prepared_transaction_of_a_killed_producer(tpc_broker):
    bootstrap = tpc_broker.bootstrap
    topic = await create_topic(bootstrap, unique("tpc"))
    transactional_id = unique("tid")
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CHILD, bootstrap, transactional_id, topic, "10", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 30)
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    stored = str(PreparedTxnState.parse(line.decode()))  # what an outside coordinator would keep
    assert stored
    await _nothing_visible(bootstrap, topic)  # prepared, not committed: read_committed waits
    async with _tpc_producer(bootstrap, transactional_id) as successor:
        assert successor.transaction_version is None  # start() left init_transactions to us
        await successor.init_transactions(keep_prepared_transaction=True)
        assert successor.prepared_transaction_state == PreparedTxnState.parse(stored)
        await successor.complete_transaction(PreparedTxnState.parse(stored))
        assert successor.prepared_transaction_state is None
        async with successor.transaction():  # and it carries on as a normal transactional producer
            await successor.send(topic, b"next", partition=0)
    got = await asyncio.to_thread(read_committed, bootstrap, topic, 11)
    assert sorted(got) == sorted([b"prepared-%d" % i for i in range(10)] + [b"next"])


async def test_a_state_that_does_not_match_aborts_the_kept_transaction(tpc_broker):
    bootstrap = tpc_broker.bootstrap
    topic = await create_topic(bootstrap, unique("tpc"))
    transactional_id = unique("tid")
    first, state = await _prepare(bootstrap, transactional_id, topic, 6)
    await first.stop()  # closed without ending it: the prepared transaction stays
    await _nothing_visible(bootstrap, topic)
    async with _tpc_producer(bootstrap, transactional_id) as successor:
        await successor.init_transactions(keep_prepared_transaction=True)
        kept = successor.prepared_transaction_state
        assert kept == state
        stale = PreparedTxnState(state.producer_id, state.epoch - 1) if state.epoch else PreparedTxnState()
        await successor.complete_transaction(stale)
        async with successor.transaction():
            await successor.send(topic, b"after", partition=1)
    assert await asyncio.to_thread(read_committed, bootstrap, topic, 1) == [b"after"]


async def test_a_prepared_transaction_survives_a_broker_restart(broker_factory):
    broker = broker_factory(TXN_BROKER)
    topic = await create_topic(broker.bootstrap, unique("tpc"))
    transactional_id = unique("tid")
    first, state = await _prepare(broker.bootstrap, transactional_id, topic, 8)
    await first.stop()
    await asyncio.to_thread(broker.restart, kill=True)
    async with _tpc_producer(broker.bootstrap, transactional_id) as successor:
        await successor.init_transactions(keep_prepared_transaction=True)
        assert successor.prepared_transaction_state == state
        await successor.complete_transaction(PreparedTxnState.parse(str(state)))
    got = await asyncio.to_thread(read_committed, broker.bootstrap, topic, 8)
    assert sorted(got) == sorted(b"prepared-%d" % i for i in range(8))


async def test_two_phase_commit_with_transaction_protocol_v1(broker_factory):
    broker = broker_factory({**TXN_BROKER, "transaction.version": 1})
    topic = await create_topic(broker.bootstrap, unique("tpc"))
    transactional_id = unique("tid")
    first, state = await _prepare(broker.bootstrap, transactional_id, topic, 3)
    assert first.transaction_version == 1
    await first.stop()
    async with _tpc_producer(broker.bootstrap, transactional_id) as successor:
        await successor.init_transactions(keep_prepared_transaction=True)
        assert successor.transaction_version == 1 and successor.prepared_transaction_state == state
        await successor.complete_transaction(state)
        async with successor.transaction():
            await successor.send(topic, b"next", partition=1)
    got = await asyncio.to_thread(read_committed, broker.bootstrap, topic, 4)
    assert sorted(got) == sorted([b"prepared-%d" % i for i in range(3)] + [b"next"])


async def test_the_first_producer_is_fenced_once_the_successor_keeps_its_transaction(tpc_broker):
    bootstrap = tpc_broker.bootstrap
    topic = await create_topic(bootstrap, unique("tpc"))
    transactional_id = unique("tid")
    first, state = await _prepare(bootstrap, transactional_id, topic, 4)
    try:
        async with _tpc_producer(bootstrap, transactional_id) as successor:
            await successor.init_transactions(keep_prepared_transaction=True)
            with pytest.raises(ProducerFencedError):
                await first.complete_transaction(state)
            with pytest.raises(ProducerFencedError):
                await first.send(topic, b"zombie")
            await successor.complete_transaction(state)
    finally:
        await first.stop()
    got = await asyncio.to_thread(read_committed, bootstrap, topic, 4)
    assert sorted(got) == sorted(b"prepared-%d" % i for i in range(4))


async def test_the_preparing_producer_may_complete_commit_or_abort_itself(tpc_broker):
    bootstrap = tpc_broker.bootstrap
    topic = await create_topic(bootstrap, unique("tpc"))
    producer, state = await _prepare(bootstrap, unique("tid"), topic, 2)
    try:
        await producer.complete_transaction(state)  # its own state: commit
        for outcome in ("commit", "abort"):
            await producer.begin_transaction()
            await producer.send(topic, outcome.encode(), partition=0)
            await producer.prepare_transaction()
            await (producer.commit_transaction() if outcome == "commit" else producer.abort_transaction())
        await producer.begin_transaction()
        assert await producer.prepare_transaction() == PreparedTxnState()  # nothing sent
        await producer.complete_transaction(PreparedTxnState())
    finally:
        await producer.stop()
    got = await asyncio.to_thread(read_committed, bootstrap, topic, 3)
    assert sorted(got) == [b"commit", b"prepared-0", b"prepared-1"]


async def test_init_without_keeping_aborts_a_prepared_transaction(tpc_broker):
    bootstrap = tpc_broker.bootstrap
    topic = await create_topic(bootstrap, unique("tpc"))
    transactional_id = unique("tid")
    first, _ = await _prepare(bootstrap, transactional_id, topic, 3)
    await first.stop()
    async with _tpc_producer(bootstrap, transactional_id) as successor:
        await successor.init_transactions()
        assert successor.prepared_transaction_state is None
        async with successor.transaction():
            await successor.send(topic, b"fresh", partition=0)
    assert await asyncio.to_thread(read_committed, bootstrap, topic, 1) == [b"fresh"]


async def test_calls_in_the_wrong_state_raise(tpc_broker):
    bootstrap = tpc_broker.bootstrap
    topic = await create_topic(bootstrap, unique("tpc"))
    async with txn_producer(bootstrap, unique("tid")) as plain:
        with pytest.raises(IllegalStateError, match="enable_two_phase_commit"):
            await plain.init_transactions(keep_prepared_transaction=True)
        await plain.begin_transaction()
        with pytest.raises(IllegalStateError, match="enable_two_phase_commit"):
            await plain.prepare_transaction()
        await plain.abort_transaction()
    async with _tpc_producer(bootstrap, unique("tid")) as producer:
        with pytest.raises(IllegalStateError, match="init_transactions"):
            await producer.begin_transaction()
        await producer.init_transactions(keep_prepared_transaction=True)
        assert producer.prepared_transaction_state is None  # nothing was kept
        assert producer.transaction_version == 2
        with pytest.raises(IllegalStateError, match="without a prepared transaction"):
            await producer.complete_transaction(PreparedTxnState())
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await producer.prepare_transaction()
        await producer.begin_transaction()
        await producer.send(topic, b"x", partition=0)
        state = await producer.prepare_transaction()
        with pytest.raises(IllegalStateError, match="prepared"):
            await producer.send(topic, b"after prepare")
        with pytest.raises(IllegalStateError):
            await producer.begin_transaction()
        with pytest.raises(IllegalStateError):
            await producer.send_offsets_to_transaction({(topic, 0): 1}, "group")
        with pytest.raises(TypeError):
            await producer.complete_transaction(str(state))  # type: ignore[arg-type]
        await producer.abort_transaction()


def test_sync_facade(tpc_broker):
    bootstrap = tpc_broker.bootstrap
    topic = asyncio.run(create_topic(bootstrap, unique("tpc")))
    transactional_id = unique("tid")
    options = {"transactional_id": transactional_id, "enable_two_phase_commit": True, "max_block_ms": 20000}
    first = SyncProducer(bootstrap_servers=bootstrap, **options)
    try:
        first.init_transactions()
        assert first.transaction_version == 2
        first.begin_transaction()
        for i in range(5):
            first.send(topic, b"sync-%d" % i, partition=i % 2)
        stored = str(first.prepare_transaction())
    finally:
        first.close()
    successor = SyncProducer(bootstrap_servers=bootstrap, **options)
    try:
        successor.init_transactions(keep_prepared_transaction=True)
        assert str(successor.prepared_transaction_state) == stored
        successor.complete_transaction(PreparedTxnState.parse(stored))
    finally:
        successor.close()
    got = read_committed(bootstrap, topic, 5)
    assert sorted(got) == sorted(b"sync-%d" % i for i in range(5))
