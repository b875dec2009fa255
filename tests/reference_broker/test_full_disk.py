"""A full disk: refused appends are not logged one line each, and the answers name no data path.

The broker's data dir lies on a small tmpfs (skipped where mounting is not permitted). A producer
fills it until appends are refused with KAFKA_STORAGE_ERROR, then keeps hammering; the broker
stays up, logs the refusal a bounded number of times, never shows its data directory to the client,
and after a restart a reader gets every acknowledged record.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.testing import BrokerProcess
from sdk.protocol import messages
from sdk.protocol.errors import ErrorCode
from sdk.records import RecordBatchBuilder, iter_batches
from tests.reference_broker.wire import WireClient, fetch_request

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mounts a tmpfs")

HAMMER = 300


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def produce(wire: WireClient, topic: str, value: bytes) -> messages.ProduceResponse.PartitionProduceResponse:
    builder = RecordBatchBuilder()
    builder.append(1_700_000_000_000, None, value)
    request = messages.ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            messages.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    messages.ProduceRequest.PartitionProduceData(index=0, records=builder.build())
                ],
            )
        ],
    )
    return wire.request(request, 9).responses[0].partition_responses[0]


def test_full_disk_refusals_are_rate_limited_and_name_no_path(small_disk: Path) -> None:
    ballast = small_disk / "ballast"  # removed before the restart, so the broker has room to start
    ballast.write_bytes(b"\0" * (512 * 1024))
    proc = BrokerProcess(data_dir=small_disk / "data", config={"log.segment.bytes": 1 << 20})
    with proc:
        topic = f"full-{uuid.uuid4().hex[:8]}"
        with WireClient(proc.bootstrap) as wire:
            created = wire.request(
                messages.CreateTopicsRequest(
                    topics=[
                        messages.CreateTopicsRequest.CreatableTopic(
                            name=topic,
                            num_partitions=1,
                            replication_factor=1,
                            configs=[
                                messages.CreateTopicsRequest.CreatableTopicConfig(
                                    name="index.interval.bytes", value="1000000"
                                )
                            ],
                        )
                    ],
                    timeout_ms=10_000,
                ),
                7,
            ).topics[0]
            assert created.error_code == 0
            acked: list[bytes] = []
            refused = None
            for i in range(10_000):
                value = b"%06d" % i + b"v" * 20_000
                answer = produce(wire, topic, value)
                if answer.error_code:
                    refused = answer
                    break
                acked.append(value)
            assert refused is not None and refused.error_code == ErrorCode.KAFKA_STORAGE_ERROR
            for _ in range(HAMMER):
                answer = produce(wire, topic, b"x" * 20_000)
                assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR
                assert str(small_disk) not in (answer.error_message or "")
            assert str(small_disk) not in (refused.error_message or "")

        refusal_lines = [line for line in proc.stderr().splitlines() if "refused" in line]
        assert len(refusal_lines) <= 5, refusal_lines[:10]
        # The partition went offline as Kafka takes a failed log dir offline; after a restart a
        # reader gets every acknowledged record.
        ballast.unlink()
        proc.restart()
        with WireClient(proc.bootstrap) as reader:
            got: list[bytes] = []
            while len(got) < len(acked):
                part = (
                    reader.request(fetch_request(topic, 0, len(got), max_bytes=1 << 20), 12)
                    .responses[0]
                    .partitions[0]
                )
                assert part.error_code == 0
                batch_values = [
                    r.value for b in iter_batches(bytes(part.records)) for r in b if r.offset >= len(got)
                ]
                assert batch_values
                got.extend(v for v in batch_values if v is not None)
            assert got == acked
