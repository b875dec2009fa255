"""The ``quorum-state`` file: a node's raft epoch, known leader and vote, kept across restarts.

Kafka's ``FileQuorumStateStore`` JSON: ``{"leaderId":L,"leaderEpoch":E,"votedId":V,
"votedDirectoryId":"...","data_version":1}`` (version 0 also carried ``clusterId``,
``appliedOffset`` and ``currentVoters``; both are read). -1 means none. The file is replaced
atomically (written beside it, fsynced, renamed) so a crash leaves the old or the new state,
and a node never votes twice in one epoch.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from reference_broker.log.log_manager import topic_id_from_string, topic_id_to_string
from reference_broker.raft.messages import NO_DIRECTORY

FILE_NAME = "quorum-state"
_NO_DIRECTORY = "AAAAAAAAAAAAAAAAAAAAAA"  # the zero uuid as Kafka's base64 writes it


class QuorumStateError(ValueError):
    """The quorum-state file is not valid JSON of a known data version."""


@dataclass(frozen=True)
class ElectionState:
    """What the file records: the epoch, the leader known in it and the vote cast in it."""

    epoch: int = 0
    leader_id: int | None = None
    voted_id: int | None = None
    voted_directory_id: uuid.UUID = NO_DIRECTORY


def _opt(value: object, key: str) -> int | None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise QuorumStateError(f"quorum-state field {key} is not an integer: {value!r}")
    return None if value < 0 else value


def read_quorum_state(directory: Path) -> ElectionState | None:
    """The state stored in ``directory``, or None if there is no file yet."""
    path = Path(directory) / FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise QuorumStateError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise QuorumStateError(f"{path} does not hold a JSON object")
    version = data.get("data_version")
    if version not in (0, 1):
        raise QuorumStateError(f"{path}: unknown data_version {version!r}")
    epoch = data.get("leaderEpoch")
    if not isinstance(epoch, int) or epoch < 0:
        raise QuorumStateError(f"{path}: leaderEpoch is not a non-negative integer: {epoch!r}")
    directory = data.get("votedDirectoryId", _NO_DIRECTORY)
    try:
        voted_directory = topic_id_from_string(directory) if isinstance(directory, str) else None
    except ValueError:
        voted_directory = None
    if voted_directory is None:
        raise QuorumStateError(f"{path}: votedDirectoryId is not a uuid: {directory!r}")
    return ElectionState(epoch, _opt(data.get("leaderId", -1), "leaderId"),
                         _opt(data.get("votedId", -1), "votedId"), voted_directory)


def write_quorum_state(directory: Path, state: ElectionState) -> None:
    """Replace the file in ``directory`` with ``state`` (data version 1), durably."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    body = {
        "leaderId": -1 if state.leader_id is None else state.leader_id,
        "leaderEpoch": state.epoch,
        "votedId": -1 if state.voted_id is None else state.voted_id,
        "votedDirectoryId": topic_id_to_string(state.voted_directory_id),
        "data_version": 1,
    }
    path = directory / FILE_NAME
    tmp = directory / (FILE_NAME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(json.dumps(body, separators=(",", ":")))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
