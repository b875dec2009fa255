"""Every exception the SDK raises, importable from one place.

Errors a broker answers with are the protocol's classes (one per Kafka error code, each with
``.code``, ``.name`` and ``.retriable``), re-exported here so user code never has to know about
``sdk.protocol``. This module adds the conditions only the client can detect (a connection that
drops, a deadline that passes, a bad setting) as subclasses of the same ``KafkaError`` base, so
``except KafkaError`` covers everything the SDK raises on purpose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sdk.protocol import _generated_errors
from sdk.protocol._generated_errors import *  # noqa: F403  (one class per broker error code, ErrorCode)
from sdk.protocol._generated_errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    CorruptMessageError,
    DuplicateSequenceNumberError,
    FetchSessionIdNotFoundError,
    GroupIdNotFoundError,
    InvalidConfigError,
    InvalidFetchSessionEpochError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    OperationNotAttemptedError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    ReassignmentInProgressError,
    SaslAuthenticationFailedError,
    SecurityDisabledError,
    TransactionalIdAuthorizationFailedError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
    UnknownServerError,
)
from sdk.protocol.errors import (
    DecodeError,
    EncodeError,
    ErrorCode,
    KafkaError,
    MessageTooLargeError,
    UnknownKafkaError,
    UnsupportedVersionError,
    error_for_code,
    make_error,
    raise_for_code,
)

__all__ = [
    "BufferExhaustedError",
    "ClientError",
    "ConfigError",
    "DecodeError",
    "DeliveryTimeoutError",
    "EncodeError",
    "ErrorCode",
    "IllegalStateError",
    "InvalidPartitionError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "MetadataTimeoutError",
    "NoBrokersAvailableError",
    "ProducerClosedError",
    "RecordTooLargeError",
    "ResponseTimeoutError",
    "SerializationError",
    "TransactionAbortedError",
    "TransactionsNotImplementedError",
    "UnknownKafkaError",
    "UnsupportedVersionError",
    "error_for_code",
    "make_error",
    "raise_for_code",
]

# One class per broker error code (NotLeaderOrFollowerError, OutOfOrderSequenceNumberError, ...),
# generated as static definitions (``sdk.protocol._generated_errors``).
__all__ += [name for name in _generated_errors.__all__ if name not in __all__]


class ClientError(KafkaError):
    """A condition the client detected itself; it has no broker error code (``code`` is None)."""

    code = None  # type: ignore[assignment]  # no broker code; KafkaError.code is an int
    name = "CLIENT_ERROR"

    def __str__(self) -> str:
        return self.message or type(self).__name__


class KafkaConnectionError(ClientError):
    """A connection could not be made or was lost; what was in flight on it has an unknown fate."""

    name = "CONNECTION_ERROR"
    retriable = True


class NoBrokersAvailableError(KafkaConnectionError):
    """None of the bootstrap servers could be reached (or none answered ApiVersions/Metadata)."""

    name = "NO_BROKERS_AVAILABLE"
    retriable = False


class KafkaTimeoutError(ClientError):
    """A client-side deadline passed. Subclasses say which one."""

    name = "TIMEOUT"
    retriable = True


class ResponseTimeoutError(KafkaTimeoutError):
    """No response within ``request_timeout_ms``; the connection is closed, as Kafka clients do,
    because later responses on it would be stuck behind the missing one."""

    name = "RESPONSE_TIMEOUT"


class DeliveryTimeoutError(KafkaTimeoutError):
    """A batch was not acknowledged within ``delivery_timeout_ms`` of its creation (retries included)."""

    name = "DELIVERY_TIMEOUT"
    retriable = False


class BufferExhaustedError(KafkaTimeoutError):
    """``send`` waited ``max_block_ms`` for room in the producer's memory bound and got none."""

    name = "BUFFER_EXHAUSTED"
    retriable = False


class MetadataTimeoutError(KafkaTimeoutError):
    """A topic (or partition) did not appear in cluster metadata within ``max_block_ms``.

    ``last_error`` is what the brokers said about the topic, typically
    ``UnknownTopicOrPartitionError`` when auto-creation is off.
    """

    name = "METADATA_TIMEOUT"
    retriable = False

    def __init__(self, message: str, *, topic: str | None = None, last_error: BaseException | None = None):
        self.topic = topic
        self.last_error = last_error
        super().__init__(message)


class ConfigError(ClientError, ValueError):
    """A setting has an invalid value or conflicts with another; ``option`` names it."""

    name = "CONFIG_ERROR"

    def __init__(self, option: str, message: str):
        self.option = option
        super().__init__(f"{option}: {message}")


class SerializationError(ClientError):
    """A key or value serializer raised; the original exception is ``__cause__``."""

    name = "SERIALIZATION_ERROR"


class RecordTooLargeError(MessageTooLargeError):
    """A record larger than ``max_request_size`` or than the whole memory bound.

    Subclass of the broker's ``MessageTooLargeError`` so one ``except`` covers both the
    client-side and the broker-side rejection.
    """

    def __str__(self) -> str:
        return self.message or "record too large"


class IllegalStateError(ClientError):
    """A call the object's current state does not allow (e.g. ``send`` before ``start``)."""

    name = "ILLEGAL_STATE"


class ProducerClosedError(IllegalStateError):
    """The producer is stopping or stopped: the record was not accepted, or was dropped unsent."""

    name = "PRODUCER_CLOSED"


class InvalidPartitionError(ClientError, ValueError):
    """An explicit partition outside the topic's partition range."""

    name = "INVALID_PARTITION"


class TransactionsNotImplementedError(ClientError, NotImplementedError):
    """Transactional producer methods are not implemented yet; ``transactional_id`` is only stored."""

    name = "TRANSACTIONS_NOT_IMPLEMENTED"


class TransactionAbortedError(ClientError):
    """A record was dropped unsent because its transaction was aborted (by ``abort_transaction``,
    or because an earlier failure in the transaction made it abortable: that failure is
    ``__cause__``). Java's ``TransactionAbortedException``."""

    name = "TRANSACTION_ABORTED"


# -- aiokafka's names ---------------------------------------------------------------------------
# Code written for aiokafka catches these; where our name differs, its name is the same class.
# (Names aiokafka shares with us, e.g. KafkaTimeoutError, UnknownTopicOrPartitionError,
# KafkaConnectionError, IllegalStateError, RecordTooLargeError, need no alias.)

NoBrokersAvailable = NoBrokersAvailableError
ProducerClosed = ProducerClosedError
ProducerFenced = ProducerFencedError
KafkaConfigurationError = ConfigError
UnknownError = UnknownServerError
MessageSizeTooLargeError = MessageTooLargeError
NotLeaderForPartitionError = NotLeaderOrFollowerError
NotCoordinatorForGroupError = NotCoordinatorError
GroupCoordinatorNotAvailableError = CoordinatorNotAvailableError
GroupLoadInProgressError = CoordinatorLoadInProgressError
CorruptRecordException = CorruptMessageError
InvalidMessageError = CorruptMessageError
InvalidConfigurationError = InvalidConfigError
AuthenticationFailedError = SaslAuthenticationFailedError
SaslAuthenticationFailed = SaslAuthenticationFailedError
OutOfOrderSequenceNumber = OutOfOrderSequenceNumberError
DuplicateSequenceNumber = DuplicateSequenceNumberError
InvalidProducerEpoch = InvalidProducerEpochError
UnknownProducerId = UnknownProducerIdError
InvalidProducerIdMapping = InvalidProducerIdMappingError
InvalidTransactionTimeout = InvalidTransactionTimeoutError
InvalidTxnState = InvalidTxnStateError
ConcurrentTransactions = ConcurrentTransactionsError
TransactionCoordinatorFenced = TransactionCoordinatorFencedError
TransactionalIdAuthorizationFailed = TransactionalIdAuthorizationFailedError
MemberIdRequired = MemberIdRequiredError
GroupIdNotFound = GroupIdNotFoundError
NonEmptyGroup = NonEmptyGroupError
FetchSessionIdNotFound = FetchSessionIdNotFoundError
InvalidFetchSessionEpoch = InvalidFetchSessionEpochError
OperationNotAttempted = OperationNotAttemptedError
SecurityDisabled = SecurityDisabledError
ReassignmentInProgress = ReassignmentInProgressError

AIOKAFKA_ALIASES = [
    "AuthenticationFailedError",
    "ConcurrentTransactions",
    "CorruptRecordException",
    "DuplicateSequenceNumber",
    "FetchSessionIdNotFound",
    "GroupCoordinatorNotAvailableError",
    "GroupIdNotFound",
    "GroupLoadInProgressError",
    "InvalidConfigurationError",
    "InvalidFetchSessionEpoch",
    "InvalidMessageError",
    "InvalidProducerEpoch",
    "InvalidProducerIdMapping",
    "InvalidTransactionTimeout",
    "InvalidTxnState",
    "KafkaConfigurationError",
    "MemberIdRequired",
    "MessageSizeTooLargeError",
    "NoBrokersAvailable",
    "NonEmptyGroup",
    "NotCoordinatorForGroupError",
    "NotLeaderForPartitionError",
    "OperationNotAttempted",
    "OutOfOrderSequenceNumber",
    "ProducerClosed",
    "ProducerFenced",
    "ReassignmentInProgress",
    "SaslAuthenticationFailed",
    "SecurityDisabled",
    "TransactionCoordinatorFenced",
    "TransactionalIdAuthorizationFailed",
    "UnknownError",
    "UnknownProducerId",
]
__all__ += AIOKAFKA_ALIASES

#: The consumer's own errors (``sdk.consumer.errors``), importable from here under aiokafka's names
#: too. Resolved on first use: ``sdk.consumer.errors`` imports this module.
_CONSUMER_ERRORS = (
    "CommitFailedError",
    "ConsumerStoppedError",
    "CorruptRecordInFetchError",
    "NoGroupIdError",
    "NoOffsetForPartitionError",
    "OffsetResetOutOfRangeError",
    "RecordTooLargeForFetchError",
)
__all__ += _CONSUMER_ERRORS

if TYPE_CHECKING:  # what __getattr__ below resolves, for type checkers
    from sdk.consumer.errors import (  # noqa: F401
        CommitFailedError,
        ConsumerStoppedError,
        CorruptRecordInFetchError,
        NoGroupIdError,
        NoOffsetForPartitionError,
        OffsetResetOutOfRangeError,
        RecordTooLargeForFetchError,
    )


def __getattr__(name: str) -> Any:
    if name in _CONSUMER_ERRORS:
        from sdk.consumer import errors as consumer_errors

        return getattr(consumer_errors, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
