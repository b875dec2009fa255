"""Fixtures for the metrics tests: ``cluster`` runs a test on the reference broker and on Apache
Kafka (the session's ``apache_kafka`` node, marked ``apache_kafka``), so the figures the clients
report are checked against traffic with both."""

from __future__ import annotations

from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Cluster:
    kind: str  # "reference" or "apache"
    bootstrap: str


@pytest.fixture(params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def cluster(request: pytest.FixtureRequest) -> Cluster:
    if request.param == "apache":
        return Cluster("apache", request.getfixturevalue("apache_kafka").bootstrap)
    return Cluster("reference", request.getfixturevalue("broker").bootstrap)
