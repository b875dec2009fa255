"""Cluster-mode wiring without processes: voters parsing, the controller registry's listener
kind, controller listeners only in cluster mode, and the wire mapping of raft messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from reference_broker.config import BrokerConfig
from reference_broker.handlers.registry import HandlerRegistry
from reference_broker.raft import wire
from reference_broker.raft.client import parse_voters
from reference_broker.raft.messages import (
    FetchRequest,
    FetchResponse,
    VoteRequest,
)
from reference_broker.security.config import configured_listeners
from reference_broker.security.listeners import ListenerError
from sdk.protocol.codec import decode, encode

pytestmark = pytest.mark.unit


def test_parse_voters() -> None:
    assert parse_voters("1@127.0.1.1:9093, 2@127.0.1.2:9094") == {
        1: ("127.0.1.1", 9093), 2: ("127.0.1.2", 9094)}
    for bad in ("1127.0.1.1:9093", "x@h:1", "1@h", "1@h:1,1@h:2"):
        with pytest.raises(ValueError, match=r"controller\.quorum\.voters"):
            parse_voters(bad)


def test_controller_registry_takes_the_raft_apis_a_broker_registry_refuses() -> None:
    def handle(broker: object, ctx: object, request: object) -> None:
        return None

    with pytest.raises(ValueError, match="controllers only"):
        HandlerRegistry(None, "broker").register(52, handle)  # type: ignore[arg-type]
    controller = HandlerRegistry(None, "controller")  # type: ignore[arg-type]
    controller.register(52, handle)
    assert controller.find(52, 0) is not None
    with pytest.raises(ValueError, match="listener kind"):
        HandlerRegistry(None, "zookeeper")  # type: ignore[arg-type]


def test_controller_listener_only_in_cluster_mode(tmp_path: Path) -> None:
    props = {"listeners": "PLAINTEXT://127.0.1.1:0,CONTROLLER://127.0.1.1:0",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
             "controller.listener.names": "CONTROLLER"}
    with pytest.raises(ListenerError, match="CONTROLLER"):
        configured_listeners(BrokerConfig.build(tmp_path, properties=props))
    cluster = BrokerConfig.build(tmp_path, properties={
        **props, "controller.quorum.voters": "1@127.0.1.1:9093"})
    assert [lst.name for lst in configured_listeners(cluster)] == ["PLAINTEXT", "CONTROLLER"]


def test_vote_and_fetch_survive_the_wire() -> None:
    vote = wire.to_request(VoteRequest(3, 2, 1, 17), "c")
    vote = decode(type(vote), encode(vote, 1), 1)
    assert wire.vote_request(vote) == VoteRequest(3, 2, 1, 17)
    fetch = wire.to_request(FetchRequest(3, 2, 17, 1), "c")
    fetch = decode(type(fetch), encode(fetch, 17), 17)
    assert wire.fetch_request(fetch) == FetchRequest(3, 2, 17, 1)
    answer = wire.fetch_response(FetchResponse(0, 3, 1, 10, b"", (1, 12)))
    answer = decode(type(answer), encode(answer, 17), 17)
    part = answer.responses[0].partitions[0]
    assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (1, 12)
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (1, 3)


def test_raft_requests_of_another_cluster_are_refused() -> None:
    from types import SimpleNamespace

    from reference_broker.raft import handlers

    node = SimpleNamespace(cluster_id="ours", raft=None)
    vote = wire.to_request(VoteRequest(3, 2, 1, 17), "theirs")
    assert handlers._vote(node, None, vote).error_code == 104
    assert handlers._vote(node, None, wire.to_request(VoteRequest(3, 2, 1, 17), "ours")).error_code == 8
