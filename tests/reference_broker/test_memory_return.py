"""After a burst of large requests the broker gives the freed memory back to the kernel: its
resident size falls back near where it was before the burst, instead of staying at the peak."""

from __future__ import annotations

import os
import platform
import time
import uuid
from pathlib import Path

import pytest

from reference_broker.testing import BrokerFactory
from sdk.protocol.messages import MetadataRequest, ProduceRequest
from sdk.records import RecordBatchBuilder
from tests.reference_broker.wire import WireClient

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="freed memory is returned through glibc's malloc_trim",
)

CONNECTIONS = 100
BATCH_BYTES = 900 * 1024
RETURN_DEADLINE_S = 30.0


def _resident_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def test_memory_freed_after_a_burst_of_large_produce_requests_is_returned(
    broker_factory: BrokerFactory,
) -> None:
    proc = broker_factory({"num.partitions": 1})
    assert proc.pid is not None
    topic = f"burst-{uuid.uuid4().hex[:8]}"
    builder = RecordBatchBuilder()
    builder.append(1_000, None, os.urandom(BATCH_BYTES))
    produce = ProduceRequest(
        acks=1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=builder.build())],
            )
        ],
    )
    with WireClient(proc.bootstrap) as client:
        client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
    before = _resident_bytes(proc.pid)

    # Each connection's request buffer is a block of its own, all alive at once, freed at close.
    clients = [WireClient(proc.bootstrap, timeout=60.0) for _ in range(CONNECTIONS)]
    try:
        for client in clients:
            client.send(produce, 9)
        for client in clients:
            _, response = client.receive(ProduceRequest.API_KEY, 9)
            assert response.responses[0].partition_responses[0].error_code == 0
        peak = _resident_bytes(proc.pid)
    finally:
        for client in clients:
            client.close()
    grown = peak - before
    assert grown > CONNECTIONS * BATCH_BYTES // 2, (before, peak)

    deadline = time.monotonic() + RETURN_DEADLINE_S
    resident = _resident_bytes(proc.pid)
    while resident > before + grown // 4 and time.monotonic() < deadline:
        time.sleep(0.2)
        resident = _resident_bytes(proc.pid)
    assert resident <= before + grown // 4, (
        f"resident {resident >> 20} MiB; before {before >> 20}, peak {peak >> 20}"
    )
