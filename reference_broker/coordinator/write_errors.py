"""The error a client gets when a coordinator's write to its internal topic fails.

Kafka maps a failed append of coordinator records with one table (the group coordinator's
CoordinatorOperationExceptionHelper, the transaction coordinator's TransactionStateManager):
a record too large for the topic is a bug-like UNKNOWN_SERVER_ERROR (retrying cannot help), a
missing or unwritable partition is COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR (retry after
finding the coordinator again). Anything that is not a Kafka error (an OSError the storage did
not translate) is UNKNOWN_SERVER_ERROR, as Kafka's ``Errors.forException`` makes it.
"""

from __future__ import annotations

from sdk.protocol.errors import ErrorCode as E

__all__ = ["write_error_code"]

_MAPPED = {
    E.NETWORK_EXCEPTION: E.COORDINATOR_LOAD_IN_PROGRESS,
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.INVALID_FETCH_SIZE: E.UNKNOWN_SERVER_ERROR,
}


def write_error_code(exc: BaseException) -> int:
    """The client's error code for a coordinator write that raised ``exc``."""
    code = getattr(exc, "code", None)
    if not isinstance(code, int) or code == E.NONE:
        return E.UNKNOWN_SERVER_ERROR
    return int(_MAPPED.get(E(code), code)) if code in E._value2member_map_ else code
