"""The controller listener's authorization table covers every API a controller serves: installing
it over a registry holding an API without a check is refused at start, never served open."""

from __future__ import annotations

from typing import Any

import pytest

from reference_broker.controller.authorization import OPEN, checked_api_keys, install
from reference_broker.handlers.registry import HandlerRegistry

pytestmark = pytest.mark.unit


def _answer(broker: Any, ctx: Any, request: Any) -> None:
    return None


def test_every_controller_listener_api_of_kafka_has_a_check() -> None:
    """Kafka's controller-listener APIs (their definitions name the "controller" listener) that
    this project may serve: each is checked or answered to anyone as Kafka does."""
    controller_apis = {1, 17, 18, 19, 20, 29, 30, 31, 32, 33, 36, 37, 43, 44, 45, 46, 49, 51, 52, 53, 54, 55,
                       56, 57, 58, 59, 60, 62, 63, 64, 67, 70, 73, 80, 81, 82}
    assert controller_apis - checked_api_keys() - OPEN == set()


def test_an_api_without_a_check_stops_the_install() -> None:
    registry = HandlerRegistry(None, "controller")  # type: ignore[arg-type]  # no broker needed
    registry.register(19, _answer)  # CreateTopics: checked
    registry.register(0, _answer)  # Produce: no controller check
    with pytest.raises(RuntimeError, match=r"without an authorization check: \[0\]"):
        install(registry)
