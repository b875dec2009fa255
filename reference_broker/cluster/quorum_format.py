"""Formatting a node's storage for a dynamic KRaft quorum, as Kafka's ``kafka-storage format``
does with ``--standalone``, ``--initial-controllers`` or ``--no-initial-controllers``.

Formatting writes ``meta.properties`` (``cluster.id``, ``node.id``, ``directory.id``,
``version=1``) and, when initial controllers are given, the bootstrap checkpoint
(``reference_broker.raft.bootstrap``) with kraft.version 1 and those voters. An initial
controller's directory id is the one its checkpoint names, so it is chosen here, before the node
first starts. A directory formatted already is left as it is (Kafka refuses it without
``--ignore-formatted``; the launcher formats at every start, so it keeps what it finds).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path

from reference_broker.log.log_manager import META_PROPERTIES, topic_id_from_string, topic_id_to_string
from reference_broker.raft.bootstrap import write_bootstrap_checkpoint
from reference_broker.raft.voter_set import SUPPORTED_KRAFT_VERSIONS, Endpoint, Voter, VoterSet

#: what ``--initial-controllers`` names: node id -> (directory id, host, port)
InitialControllers = Mapping[int, tuple[uuid.UUID, str, int]]


def stored_directory_id(data_dir: Path) -> uuid.UUID | None:
    """The ``directory.id`` of a formatted directory, or None when it is not formatted."""
    path = Path(data_dir) / META_PROPERTIES
    if not path.exists():
        return None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "directory.id" and value.strip():
            return topic_id_from_string(value.strip())
    return None


def format_node(data_dir: Path, node_id: int, cluster_id: str, *,
                initial_controllers: InitialControllers | None = None,
                directory_id: uuid.UUID | None = None,
                listener: str = "CONTROLLER") -> uuid.UUID:
    """Format ``data_dir`` for node ``node_id``; its directory id. ``initial_controllers`` None
    is ``--no-initial-controllers`` (the node starts as an observer); a mapping naming only this
    node is ``--standalone``."""
    data_dir = Path(data_dir)
    existing = stored_directory_id(data_dir)
    if existing is not None:
        return existing
    if initial_controllers and node_id in initial_controllers:
        directory_id = initial_controllers[node_id][0]
    directory_id = directory_id or uuid.uuid4()
    data_dir.mkdir(parents=True, exist_ok=True)
    if initial_controllers:
        write_bootstrap_checkpoint(data_dir, VoterSet({
            n: Voter(n, d, (Endpoint(listener, host, port),), SUPPORTED_KRAFT_VERSIONS)
            for n, (d, host, port) in initial_controllers.items()}))
    body = (f"#\n#Written by reference_broker\ncluster.id={cluster_id}\n"
            f"directory.id={topic_id_to_string(directory_id)}\nnode.id={node_id}\nversion=1\n")
    (data_dir / META_PROPERTIES).write_text(body, encoding="utf-8")
    return directory_id
