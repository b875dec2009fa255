"""The controller service over a stand-in for a single-voter raft quorum: appends commit on the
next turn of the event loop, as the leader of a one-voter quorum commits them."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from reference_broker.controller.service import ControllerService, NotControllerError
from reference_broker.controller.settings import ControllerSettings
from reference_broker.controller.supported_features import SUPPORTED_FEATURES
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import BrokerRegistrationRequest

pytestmark = pytest.mark.unit


class OneVoterLog:
    def __init__(self) -> None:
        self.listeners: list[Any] = []
        self.end_offset = -1
        self.epoch = 0
        self.leader: int | None = None
        self.batches: list[list[Any]] = []

    def register(self, listener: Any) -> None:
        self.listeners.append(listener)

    def elect(self, leader: int | None) -> None:
        self.epoch += 1
        self.leader = leader
        for listener in self.listeners:
            listener.handle_leader_change(SimpleNamespace(leader_id=leader, epoch=self.epoch))

    async def append(self, records: list[Any], *, epoch: int) -> int:
        if self.leader != 1 or epoch != self.epoch:
            raise RuntimeError("not leader")
        base = self.end_offset + 1
        self.end_offset += len(records)
        last = self.end_offset
        self.batches.append(records)
        batch = SimpleNamespace(base_offset=base, last_offset=last, epoch=epoch, records=list(records))
        asyncio.get_running_loop().call_soon(lambda: [lst.handle_commit(batch) for lst in self.listeners])
        return last


async def wait_for(condition: Any) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0)


async def test_activation_bootstraps_then_serves_and_steps_down() -> None:
    log = OneVoterLog()
    service = ControllerService(log, ControllerSettings(node_id=1, cluster_id="c"))
    with pytest.raises(NotControllerError):
        await service.submit(lambda now: service.core.bootstrap())
    log.elect(1)
    await wait_for(lambda: service.is_active and "metadata.version" in service.core.committed.features)
    no_version = BrokerRegistrationRequest(broker_id=2, cluster_id="c", incarnation_id=uuid.uuid4())
    refused = await service.submit(lambda now: service.core.cluster.register(no_version, now))
    assert refused.error_code == ErrorCode.UNSUPPORTED_VERSION
    # Kafka's check: a broker must support every finalized level; naming only metadata.version
    # it does not support the finalized transaction.version 2 and group.version 1
    feature = BrokerRegistrationRequest.Feature(
        name="metadata.version", min_supported_version=1, max_supported_version=27
    )
    old = BrokerRegistrationRequest(broker_id=2, cluster_id="c", incarnation_id=uuid.uuid4(),
                                    features=[feature])
    refused = await service.submit(lambda now: service.core.cluster.register(old, now))
    assert refused.error_code == ErrorCode.UNSUPPORTED_VERSION
    features = [BrokerRegistrationRequest.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                for n, (lo, hi) in SUPPORTED_FEATURES.items()]
    request = BrokerRegistrationRequest(
        broker_id=2, cluster_id="c", incarnation_id=uuid.uuid4(), features=features
    )
    response = await service.submit(lambda now: service.core.cluster.register(request, now))
    assert response.error_code == ErrorCode.NONE
    assert service.core.committed.brokers[2].epoch == response.broker_epoch
    log.elect(3)
    assert not service.is_active
    with pytest.raises(NotControllerError):
        await service.submit(lambda now: service.core.cluster.register(request, now))
    await service.stop()


@pytest.mark.parametrize(("session_timeout_ms", "interval_s"), [(3000, 0.375), (9000, 1.125), (16000, 2.0)])
def test_stale_brokers_are_checked_eight_times_per_session_timeout(
    session_timeout_ms: int, interval_s: float
) -> None:
    """Kafka's periodic fencing task runs every ``max(1 ms, broker.session.timeout.ms / 8)``, so a
    dead broker is fenced within 112.5% of its session timeout; no one-second cap."""
    settings = ControllerSettings(node_id=1, session_timeout_ms=session_timeout_ms)
    assert settings.stale_broker_check_interval_s == pytest.approx(interval_s)
