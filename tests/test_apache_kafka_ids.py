"""The Kafka fixture's cluster ids are ones ``kafka-storage format -t`` accepts."""

from __future__ import annotations

import base64
import uuid

import pytest

from tests import apache_kafka


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0xF8 encodes to '-' first in URL-safe base64: argparse would take "-t -..." for an option.
    drawn = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x10" + bytes(15))])
    monkeypatch.setattr(apache_kafka.uuid, "uuid4", lambda: next(drawn))
    cluster_id = apache_kafka.new_cluster_id()
    assert cluster_id == "EAAAAAAAAAAAAAAAAAAAAA"


def test_a_cluster_id_is_kafkas_22_character_form() -> None:
    for _ in range(200):
        cluster_id = apache_kafka.new_cluster_id()
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
