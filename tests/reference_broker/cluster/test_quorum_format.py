"""Formatting for a dynamic quorum (``kafka-storage format --standalone`` /
``--initial-controllers`` / ``--no-initial-controllers``), the launcher's ``--quorum`` and the
settings of a dynamic node."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from reference_broker.cluster.launcher import node_config, parse_args
from reference_broker.cluster.quorum_format import format_node, stored_directory_id
from reference_broker.config import BrokerConfig, ConfigError
from reference_broker.raft.bootstrap import BOOTSTRAP_SNAPSHOT_ID, bootstrap_checkpoint_path
from reference_broker.raft.snapshot import SnapshotReader
from reference_broker.raft.voter_set import VoterSet
from sdk.protocol.messages import VotersRecord

pytestmark = pytest.mark.unit


def test_standalone_writes_the_checkpoint_and_keeps_a_formatted_directory(tmp_path: Path) -> None:
    chosen = uuid.uuid4()
    node = tmp_path / "node-1"
    assert format_node(node, 1, "cid", initial_controllers={1: (chosen, "127.0.1.1", 9101)}) == chosen
    assert stored_directory_id(node) == chosen
    reader = SnapshotReader.open(bootstrap_checkpoint_path(node).parent, BOOTSTRAP_SNAPSHOT_ID)
    voters = VoterSet.from_record(next(r for r in reader.control if isinstance(r, VotersRecord)))
    assert voters.ids == {1} and voters.voters[1].directory_id == chosen
    assert voters.voters[1].endpoints[0].port == 9101
    # formatting again keeps the storage (and its directory id)
    assert format_node(node, 1, "cid", initial_controllers={1: (uuid.uuid4(), "h", 1)}) == chosen


def test_no_initial_controllers_writes_no_checkpoint(tmp_path: Path) -> None:
    node = tmp_path / "node-2"
    directory = format_node(node, 2, "cid")
    assert stored_directory_id(node) == directory
    assert not bootstrap_checkpoint_path(node).exists()
    assert "node.id=2" in (node / "meta.properties").read_text()


def test_dynamic_node_settings_and_the_launcher_option(tmp_path: Path) -> None:
    config = node_config(2, cluster_id="cid", voters="1@h:1", client_port=1, controller_port=2,
                         bootstrap_servers="127.0.1.1:2")
    assert "controller.quorum.voters" not in config
    assert config["controller.quorum.bootstrap.servers"] == "127.0.1.1:2"
    assert parse_args(["--data-dir", str(tmp_path), "--quorum", "standalone"]).quorum == "standalone"
    assert parse_args(["--data-dir", str(tmp_path)]).quorum == "static"


def test_static_voters_and_bootstrap_servers_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="exclusive"):
        BrokerConfig.build(tmp_path, properties={
            "controller.quorum.voters": "1@h:1",
            "controller.quorum.bootstrap.servers": "h:1"})
