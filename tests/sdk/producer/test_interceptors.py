"""Interceptors see every record and every acknowledgement; their failures do not stop sending."""

from __future__ import annotations

import logging

import pytest

from sdk import Producer, ProducerInterceptor, ProducerRecord, SerializationError


class Recorder(ProducerInterceptor):
    def __init__(self):
        self.sent, self.acked, self.closed = [], [], False

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        self.sent.append(record)
        headers = [*list(record.headers or []), ("traced", b"yes")]
        return record._replace(headers=headers)

    def on_acknowledgement(self, metadata, error):
        self.acked.append((metadata, error))

    def close(self):
        self.closed = True


class Broken(ProducerInterceptor):
    def on_send(self, record):
        raise RuntimeError("on_send bug")

    def on_acknowledgement(self, metadata, error):
        raise RuntimeError("on_acknowledgement bug")


async def test_interceptors_change_records_and_see_acknowledgements(kafka, consume, topic_name, caplog):
    caplog.set_level(logging.WARNING)
    topic = await kafka.create_topic(topic_name)
    recorder = Recorder()
    async with Producer(bootstrap_servers=kafka.bootstrap, interceptors=[Broken(), recorder]) as producer:
        for i in range(10):
            await producer.send(topic, b"v%d" % i, partition=i % 2)
        batch = await producer.send_many(topic, [(None, b"many")] * 5, partition=3)
        await batch
        await producer.flush()
        with pytest.raises(SerializationError):
            await producer.send(topic, "not bytes")
    assert recorder.closed
    assert len(recorder.sent) == 16
    successes = [(md, err) for md, err in recorder.acked if err is None]
    failures = [(md, err) for md, err in recorder.acked if err is not None]
    assert len(successes) == 15
    assert sorted(md.offset for md, _ in successes if md.partition == 3) == [0, 1, 2, 3, 4]
    assert len(failures) == 1 and isinstance(failures[0][1], SerializationError)
    assert "on_send bug" in caplog.text or "failed in on_send" in caplog.text
    consumed = await consume(kafka.bootstrap, topic, expected=15)
    assert all(("traced", b"yes") in r.headers for r in consumed)
