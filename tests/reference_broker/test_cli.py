"""The command line: config files, bad settings, signals, restarts on the same port and data dir."""

from __future__ import annotations

import platform
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from reference_broker.config import BrokerConfig, ConfigError, read_properties
from reference_broker.testing import BrokerFactory, BrokerProcess
from sdk.protocol.messages import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
)
from sdk.records import RecordBatchBuilder
from tests.reference_broker.wire import WireClient


def run_cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reference_broker", *args], capture_output=True, text=True, timeout=timeout
    )


def test_read_properties_format() -> None:
    text = "# comment\n! also\nnum.partitions = 3\nlog.dirs: /x\nlong.value=a,\\\n   b\n\nempty=\n"
    assert read_properties(text) == {
        "num.partitions": "3",
        "log.dirs": "/x",
        "long.value": "a,b",
        "empty": "",
    }


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ({"num.partitions": "zero"}, "num.partitions"),
        ({"num.partitions": "0"}, "at least 1"),
        ({"no.such.setting": "1"}, "no.such.setting"),
        ({"default.replication.factor": "3"}, "default.replication.factor"),
        ({"auto.create.topics.enable": "maybe"}, "auto.create.topics.enable"),
        ({"log.cleanup.policy": "shred"}, "log.cleanup.policy"),
        ({"advertised.listeners": "nonsense"}, "advertised.listeners"),
    ],
)
def test_bad_config_values(tmp_path: Path, props: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        BrokerConfig.build(tmp_path, properties=props)


def test_retention_synonyms() -> None:
    config = BrokerConfig.build("/unused", properties={"log.retention.hours": "2"})
    assert config.get("log.retention.ms") == 7_200_000
    config = BrokerConfig.build(
        "/unused", properties={"log.retention.minutes": "3", "log.retention.hours": "2"}
    )
    assert config.get("log.retention.ms") == 180_000
    assert config.log_config().retention_ms == 180_000


def test_cli_bad_config_file_exits_nonzero(tmp_path: Path) -> None:
    props = tmp_path / "broker.properties"
    props.write_text("num.partitions=-4\n")
    result = run_cli("--data-dir", str(tmp_path / "data"), "--port", "0", "--config", str(props))
    assert result.returncode == 2
    assert "configuration error" in result.stderr and "num.partitions" in result.stderr
    assert "listening" not in result.stdout
    missing = run_cli("--data-dir", str(tmp_path / "data"), "--config", str(tmp_path / "nope.properties"))
    assert missing.returncode == 2 and "cannot read config file" in missing.stderr
    assert run_cli("--port", "0").returncode == 2  # --data-dir is required


def test_unknown_event_loop_exits_nonzero(tmp_path: Path) -> None:
    result = run_cli("--data-dir", str(tmp_path), "--port", "0", "--event-loop", "trio")
    assert result.returncode == 2 and "--event-loop" in result.stderr
    with pytest.raises(ConfigError, match="event loop"):
        BrokerConfig.build(tmp_path, event_loop="trio")


def test_port_in_use_exits_nonzero(broker: BrokerProcess, tmp_path: Path) -> None:
    result = run_cli("--data-dir", str(tmp_path), "--port", str(broker.port))
    assert result.returncode == 1 and "cannot start" in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_shut_down_cleanly(broker_factory: BrokerFactory, sig: signal.Signals) -> None:
    proc = broker_factory()
    assert proc._proc is not None
    proc._proc.send_signal(sig)
    assert proc._proc.wait(15) == 0
    assert "signal received, shutting down" in proc.stderr()


def test_config_file_and_advertised_host(broker_factory: BrokerFactory) -> None:
    proc = broker_factory({"num.partitions": 3, "advertised.host": "kafka.example", "node.id": 7})
    with WireClient(proc.bootstrap) as client:
        topic = f"cli-{uuid.uuid4().hex[:8]}"
        meta = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
    assert [(b.node_id, b.host, b.port) for b in meta.brokers] == [(7, "kafka.example", proc.port)]
    assert meta.controller_id == 7
    assert len(meta.topics[0].partitions) == 3
    assert meta.topics[0].partitions[0].leader_id == 7


def test_restart_keeps_port_data_and_producer_ids(broker_factory: BrokerFactory) -> None:
    proc = broker_factory()
    port = proc.port
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    with WireClient(proc.bootstrap) as client:
        client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
        before = client.request(InitProducerIdRequest(transactional_id=None), 4).producer_id
    proc.restart(kill=True)
    assert proc.port == port
    with WireClient(proc.bootstrap) as client:
        meta = client.request(
            MetadataRequest(
                allow_auto_topic_creation=False, topics=[MetadataRequest.MetadataRequestTopic(name=topic)]
            ),
            12,
        )
        assert meta.topics[0].error_code == 0
        after = client.request(InitProducerIdRequest(transactional_id=None), 4).producer_id
    assert after > before
    proc.restart()
    with WireClient(proc.bootstrap) as client:
        assert client.request(InitProducerIdRequest(transactional_id=None), 4).producer_id > after


def test_topic_configs_survive_restart(broker_factory: BrokerFactory) -> None:
    proc = broker_factory()
    topic = f"cfg-{uuid.uuid4().hex[:8]}"
    alter = AlterConfigsRequest(
        resources=[
            AlterConfigsRequest.AlterConfigsResource(
                resource_type=2,
                resource_name=topic,
                configs=[AlterConfigsRequest.AlterableConfig(name="retention.bytes", value="4096")],
            )
        ]
    )
    describe = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=2, resource_name=topic, configuration_keys=["retention.bytes"]
            )
        ]
    )
    with WireClient(proc.bootstrap) as client:
        client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
        assert client.request(alter, 2).responses[0].error_code == 0
    proc.restart(kill=True)
    with WireClient(proc.bootstrap) as client:
        (entry,) = client.request(describe, 4).results[0].configs
    assert (entry.name, entry.value, entry.config_source) == ("retention.bytes", "4096", 1)


def test_retention_runs_on_its_interval(broker_factory: BrokerFactory) -> None:
    proc = broker_factory({"log.retention.check.interval.ms": 200, "log.retention.ms": 60_000})
    topic = f"ret-{uuid.uuid4().hex[:8]}"
    old = RecordBatchBuilder()
    old.append(1_000, None, b"ancient")
    with WireClient(proc.bootstrap) as client:
        client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
        produce = ProduceRequest(
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=topic,
                    partition_data=[ProduceRequest.PartitionProduceData(index=0, records=old.build())],
                )
            ],
        )
        assert client.request(produce, 9).responses[0].partition_responses[0].error_code == 0
        earliest = ListOffsetsRequest(
            replica_id=-1,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=topic,
                    partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-2)],
                )
            ],
        )
        deadline = time.monotonic() + 10
        while client.request(earliest, 8).topics[0].partitions[0].offset != 1:
            assert time.monotonic() < deadline, "retention never deleted the old segment"
            time.sleep(0.1)


def test_clean_shutdown_marks_logs(broker_factory: BrokerFactory) -> None:
    proc = broker_factory()
    with WireClient(proc.bootstrap) as client:
        client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="marked")]), 12)
    assert proc.terminate() == 0
    assert (proc.data_dir / "marked-0" / ".clean_shutdown").exists()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the tuning is glibc's mallopt")
def test_allocator_keeps_freed_memory_on_glibc() -> None:
    """The CLI's allocator tuning takes effect (in a child: it is process-wide)."""
    code = "from reference_broker._memory import keep_freed_memory; print(keep_freed_memory())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "True"
