"""The per-worker client pool's rules: one borrower at a time, keys kept apart, idle expiry,
a capacity, failed clients closed, and everything idle closed at exit."""

from __future__ import annotations

import pytest

from spark_integration.client_pool import ClientPool, settings_key

pytestmark = pytest.mark.unit


class FakeClient:
    """Stands for a Kafka client: only whether it was closed matters to the pool."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def close(self) -> None:
        self.closed = True


def new_pool(**kwargs: float) -> ClientPool[FakeClient]:
    return ClientPool("test", FakeClient.close, **kwargs)  # type: ignore[arg-type]


def test_a_client_is_lent_to_one_borrower_at_a_time() -> None:
    pool = new_pool()
    client = FakeClient("a")
    pool.give_back("key", client)
    assert pool.borrow("key") is client
    assert pool.borrow("key") is None  # still borrowed: a second task makes its own
    pool.give_back("key", client)
    assert pool.borrow("key") is client
    assert pool.reused == 2


def test_keys_are_kept_apart() -> None:
    pool = new_pool()
    pool.give_back(("settings", "txn-1"), FakeClient("one"))
    assert pool.borrow(("settings", "txn-2")) is None
    assert settings_key({"a": 1, "b": [2]}) == settings_key({"b": [2], "a": 1})
    assert settings_key({"a": 1}) != settings_key({"a": 2})


def test_idle_clients_expire_and_are_closed() -> None:
    pool = new_pool(idle_timeout_s=0.0)
    client = FakeClient("old")
    pool.give_back("key", client)
    assert client.closed
    assert pool.borrow("key") is None


def test_the_oldest_idle_clients_beyond_capacity_are_closed() -> None:
    pool = new_pool(capacity=2)
    clients = [FakeClient(str(i)) for i in range(3)]
    for i, client in enumerate(clients):
        pool.give_back(f"key-{i}", client)
    assert [c.closed for c in clients] == [True, False, False]
    assert pool.idle_count() == 2


def test_discarded_and_remaining_clients_are_closed() -> None:
    pool = new_pool()
    failed, idle = FakeClient("failed"), FakeClient("idle")
    pool.discard(failed)
    pool.give_back("key", idle)
    pool.close_all()
    assert failed.closed and idle.closed
    assert pool.idle_count() == 0
