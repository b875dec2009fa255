"""Fixtures of the oracle tests: Kafka's jars for the tests that run Kafka's programs."""

from __future__ import annotations

import pytest

from tests.apache_kafka import require_apache_kafka


@pytest.fixture(scope="session")
def kafka_jars_available() -> None:
    """Skip (under CI: fail) when Kafka's jars cannot be had; fetch them otherwise."""
    require_apache_kafka()
