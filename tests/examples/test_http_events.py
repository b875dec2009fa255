"""examples/http_events.py as its users run it: events POSTed over HTTP are in the topic, in
order, with their keys and headers, at the offsets the responses named; a bad topic name is a
400; SIGTERM stops the service cleanly."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from reference_broker.testing import BrokerProcess
from sdk import TopicPartition
from sdk.sync import Consumer
from tests.apache_kafka import free_port
from tests.examples.app_process import AppProcess

pytest.importorskip("aiohttp", reason="the examples extra (aiohttp) is not installed")
pytestmark = [pytest.mark.interop]


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_healthy(base: str, app: AppProcess) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            if app.process.poll() is not None:
                raise AssertionError(f"the service exited:\n{app.output}") from None
            time.sleep(0.1)
    raise AssertionError(f"the service did not answer /healthz:\n{app.output}")


def test_posted_events_are_stored_at_the_offsets_the_responses_name(broker: BrokerProcess) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    app = AppProcess("http_events.py", ["--bootstrap", broker.bootstrap, "--port", str(port)])
    try:
        wait_healthy(base, app)
        answers = []
        for i in range(30):
            status, body = post(
                f"{base}/events/http-clicks",
                b"click %d" % i,
                {"X-Key": "user-7", "X-Header-Source": "web"},
            )
            assert status == 201, body
            answers.append(body)
        status, body = post(f"{base}/events/bad%20topic!", b"x", {})
        assert status == 400 and "bad topic!" in body
        assert app.terminate() == 0, app.output
        assert "producer closed" in app.output
    finally:
        app.kill()

    partition = answers[0]["partition"]
    assert {a["partition"] for a in answers} == {partition}, "one key, one partition"
    offsets = [a["offset"] for a in answers]
    assert offsets == sorted(offsets) and len(set(offsets)) == 30
    with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as reader:
        tp = TopicPartition("http-clicks", partition)
        reader.assign([tp])
        stored: dict[int, Any] = {}
        for _ in range(100):
            for records in reader.getmany(timeout_ms=200).values():
                stored.update((r.offset, r) for r in records)
            if len(stored) >= 30:
                break
    for i, offset in enumerate(offsets):
        record = stored[offset]
        assert (record.key, record.value) == (b"user-7", b"click %d" % i)
        assert list(record.headers) == [("source", b"web")]
