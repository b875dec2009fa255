"""Fixtures of the oracle tests: Kafka's jars for the tests that run Kafka's programs."""

from __future__ import annotations

import os

import pytest

from tests.apache_kafka import KafkaUnavailable, kafka_jars


@pytest.fixture(scope="session")
def kafka_jars_available() -> None:
    """Skip (under CI: fail) when Kafka's jars cannot be had; fetch them otherwise."""
    try:
        kafka_jars()
    except KafkaUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))
