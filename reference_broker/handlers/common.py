"""Small rules several handlers share: topic name legality, lookups by name or id, error helpers."""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING

from sdk.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.log.log_manager import TopicMetadata

ZERO_UUID = uuid.UUID(int=0)
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
LEADER_EPOCH = 0  # a single node that never loses leadership stays in its first epoch


def topic_name_problem(name: str | None) -> str | None:
    """Why Kafka would reject ``name`` as a topic name (``Topic.validate``), or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters"
    if not _LEGAL_TOPIC.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


def find_topic(
    broker: Broker, name: str | None, topic_id: uuid.UUID | None
) -> tuple[TopicMetadata | None, int]:
    """The topic named by id (when non-zero) or by name, and the error code if it is missing."""
    if topic_id is not None and topic_id != ZERO_UUID:
        info = broker.logs.topic_by_id(topic_id)
        return info, (0 if info else ErrorCode.UNKNOWN_TOPIC_ID)
    info = broker.logs.topic(name) if name else None
    return info, (0 if info else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def error_code_of(exc: BaseException) -> int:
    """The protocol code for an exception a storage call raised (KafkaError) or UNKNOWN_SERVER_ERROR."""
    if isinstance(exc, KafkaError) and exc.code > 0:
        return exc.code
    return ErrorCode.UNKNOWN_SERVER_ERROR


def error_message_of(exc: BaseException) -> str:
    """The text for a response's error_message: Kafka sends the bare message, not our prefix."""
    if isinstance(exc, KafkaError):
        return exc.message or exc.name
    return str(exc)


def leader_epoch_error(requested: int) -> int:
    """Kafka's check of a client's ``current_leader_epoch`` (-1 means "don't check")."""
    if requested < 0 or requested == LEADER_EPOCH:
        return 0
    return ErrorCode.FENCED_LEADER_EPOCH if requested < LEADER_EPOCH else ErrorCode.UNKNOWN_LEADER_EPOCH
