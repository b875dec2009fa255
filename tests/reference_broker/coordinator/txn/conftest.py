"""The transaction coordinator tests' node (a real Storage, no sockets) and manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reference_broker.clock import ManualClock
from tests.reference_broker.coordinator.txn.test_txn_service import Node


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def node(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Node]:
    """A started node with a 2-partition topic "data"; stopped afterwards."""
    started = await Node(tmp_path, clock).start()
    started.storage.create_topic("data", 2, {})
    yield started
    await started.stop()
