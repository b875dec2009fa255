"""kcat (librdkafka's CLI) against the shared broker: metadata, produce and consume."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest

from reference_broker.testing import BrokerProcess

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed")


def kcat(broker: BrokerProcess, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [KCAT, "-b", broker.bootstrap, *args], input=stdin, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_produce_consume_and_list(broker: BrokerProcess) -> None:
    topic = f"kcat-{uuid.uuid4().hex[:10]}"
    lines = [f"line {i}" for i in range(20)]
    kcat(broker, "-P", "-t", topic, stdin="\n".join(lines) + "\n")
    kcat(broker, "-P", "-t", topic, "-K", ":", stdin="key1:with key\n")

    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%o %k %s\n")
    assert out.splitlines() == [f"{i}  line {i}" for i in range(20)] + ["20 key1 with key"]

    listing = kcat(broker, "-L")
    assert f'topic "{topic}" with 1 partitions' in listing
    assert f"broker 1 at {broker.bootstrap} (controller)" in listing

    json_listing = kcat(broker, "-L", "-J", "-t", topic)
    assert f'"topic":"{topic}"' in json_listing.replace(" ", "")


def test_consume_from_offset_and_count(broker: BrokerProcess) -> None:
    topic = f"kcat-off-{uuid.uuid4().hex[:10]}"
    kcat(broker, "-P", "-t", topic, stdin="".join(f"m{i}\n" for i in range(10)))
    out = kcat(broker, "-C", "-t", topic, "-o", "7", "-e")
    assert out.split() == ["m7", "m8", "m9"]
    out = kcat(broker, "-C", "-t", topic, "-o", "-2", "-e")
    assert out.split() == ["m8", "m9"]
    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-c", "3")
    assert out.split() == ["m0", "m1", "m2"]
