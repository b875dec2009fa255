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
    IllegalSaslStateError,
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
    UnsupportedSaslMechanismError,
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
    "AuthenticationError",
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
    "SaslAuthenticationError",
    "SaslMechanismRefusedError",
    "SaslStateError",
    "SerializationError",
    "SslAuthenticationError",
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


# -- authentication -----------------------------------------------------------------------------


class AuthenticationError(KafkaError):
    """The broker did not accept this client's identity (Java's ``AuthenticationException``).

    Fatal: the same credentials or certificates fail the same way again, so the client raises it
    to the caller instead of reconnecting in a loop. Each subclass says which layer refused.
    """

    name = "AUTHENTICATION_FAILED"
    retriable = False


class SslAuthenticationError(ClientError, AuthenticationError):
    """The TLS handshake failed: the broker's certificate is not trusted by ``ssl_context`` (or
    does not name the host), or the broker refused the client's certificate (or its absence)."""

    name = "SSL_AUTHENTICATION_FAILED"
    retriable = False


class SaslAuthenticationError(SaslAuthenticationFailedError, AuthenticationError):
    """SASL_AUTHENTICATION_FAILED: wrong user name, password or token (or the exchange was
    refused); the broker's reason is the message."""


class SaslMechanismRefusedError(UnsupportedSaslMechanismError, AuthenticationError):
    """UNSUPPORTED_SASL_MECHANISM: the listener does not enable ``sasl_mechanism``; the message
    lists the mechanisms it does enable."""


class SaslStateError(IllegalSaslStateError, AuthenticationError):
    """ILLEGAL_SASL_STATE: the broker got a SASL request it did not expect at that point."""


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


# -- the rest of aiokafka.errors' names ----------------------------------------------------------
# Every name ``aiokafka.errors`` defines is importable here, so ``except`` clauses of code written
# for aiokafka run after changing the import. Broker error codes are the generated classes (their
# ``errno`` is the code, ``retriable`` Kafka's); aiokafka's client-side conditions that this
# client also detects are its own classes above; the ones it never raises are plain classes
# with aiokafka's ``retriable`` flag, so code that catches them still imports.

#: aiokafka's base of every broker-answered error. Here every error, broker-answered or not,
#: derives from ``KafkaError``, so this is that class: ``except BrokerResponseError`` catches all
#: that aiokafka's does (and the client-side errors too).
BrokerResponseError = KafkaError
#: aiokafka raises it for a call its configuration does not allow (``commit()`` without a
#: ``group_id``, ``send`` outside a transaction); here those are ``IllegalStateError``s
#: (``NoGroupIdError``, ...), so this is that class.
IllegalOperation = IllegalStateError
InvalidFetchRequestError = error_for_code(ErrorCode.INVALID_FETCH_SIZE)
StaleLeaderEpochCodeError = error_for_code(ErrorCode.NETWORK_EXCEPTION)
InvalidReplicationAssignmentError = error_for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT)
LogDirNotFound = error_for_code(ErrorCode.LOG_DIR_NOT_FOUND)
DelegationTokenAuthDisabled = error_for_code(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
DelegationTokenNotFound = error_for_code(ErrorCode.DELEGATION_TOKEN_NOT_FOUND)
DelegationTokenOwnerMismatch = error_for_code(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)
DelegationTokenRequestNotAllowed = error_for_code(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
DelegationTokenAuthorizationFailed = error_for_code(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED)
DelegationTokenExpired = error_for_code(ErrorCode.DELEGATION_TOKEN_EXPIRED)
InvalidPrincipalType = error_for_code(ErrorCode.INVALID_PRINCIPAL_TYPE)
ListenerNotFound = error_for_code(ErrorCode.LISTENER_NOT_FOUND)


class NoError(KafkaError):
    """Error code 0 (aiokafka's ``NoError``): never raised, here for code that names it."""

    code = 0
    name = "NONE"


class IllegalArgumentError(ClientError, ValueError):
    """aiokafka's name for a bad argument; this client raises ``ValueError``/``ConfigError``."""

    name = "ILLEGAL_ARGUMENT"


class NodeNotReadyError(KafkaConnectionError):
    """A broker connection is not ready (aiokafka's name; here a ``KafkaConnectionError``)."""

    name = "NODE_NOT_READY"


class KafkaProtocolError(ClientError):
    """The broker's bytes broke the protocol (aiokafka's name; this client raises ``DecodeError``)."""

    name = "PROTOCOL_ERROR"
    retriable = True


class CorrelationIdError(KafkaProtocolError):
    """A response's correlation id matched no request (aiokafka's name)."""

    name = "CORRELATION_ID"


class Cancelled(ClientError):
    """aiokafka's cancelled-request error; this client lets ``asyncio.CancelledError`` through."""

    name = "CANCELLED"
    retriable = True


class TooManyInFlightRequests(ClientError):
    """aiokafka's name; this client queues requests instead of raising it."""

    name = "TOO_MANY_IN_FLIGHT_REQUESTS"
    retriable = True


class StaleMetadata(ClientError):
    """aiokafka's name; this client refreshes metadata instead of raising it."""

    name = "STALE_METADATA"
    retriable = True
    invalid_metadata = True


class MetadataEmptyBrokerList(ClientError):
    """aiokafka's name; a Metadata answer without brokers is retried here."""

    name = "METADATA_EMPTY_BROKER_LIST"
    retriable = True


class UnrecognizedBrokerVersion(ClientError):
    """aiokafka's name; versions are negotiated with ApiVersions here."""

    name = "UNRECOGNIZED_BROKER_VERSION"


class IncompatibleBrokerVersion(ClientError):
    """aiokafka's name; a broker without a needed API answers ``UnsupportedVersionError`` here."""

    name = "INCOMPATIBLE_BROKER_VERSION"


class AuthenticationMethodNotSupported(ClientError):
    """aiokafka's name; an unsupported SASL mechanism is a ``ConfigError`` or
    ``SaslMechanismRefusedError`` here."""

    name = "AUTHENTICATION_METHOD_NOT_SUPPORTED"


class KafkaUnavailableError(ClientError):
    """aiokafka's name (kafka-python's); unreachable brokers raise ``KafkaConnectionError`` here."""

    name = "KAFKA_UNAVAILABLE"


class UnsupportedCodecError(ClientError):
    """A compression codec whose library is missing (aiokafka's name)."""

    name = "UNSUPPORTED_CODEC"


class QuotaViolationError(ClientError):
    """aiokafka's name; broker quotas throttle (``throttle_time_ms``) instead of failing here."""

    name = "QUOTA_VIOLATION"


AIOKAFKA_MORE_NAMES = [
    "AuthenticationMethodNotSupported",
    "BrokerResponseError",
    "Cancelled",
    "CorrelationIdError",
    "DelegationTokenAuthDisabled",
    "DelegationTokenAuthorizationFailed",
    "DelegationTokenExpired",
    "DelegationTokenNotFound",
    "DelegationTokenOwnerMismatch",
    "DelegationTokenRequestNotAllowed",
    "IllegalArgumentError",
    "IllegalOperation",
    "IncompatibleBrokerVersion",
    "InvalidFetchRequestError",
    "InvalidPrincipalType",
    "InvalidReplicationAssignmentError",
    "KafkaProtocolError",
    "KafkaUnavailableError",
    "ListenerNotFound",
    "LogDirNotFound",
    "MetadataEmptyBrokerList",
    "NoError",
    "NodeNotReadyError",
    "QuotaViolationError",
    "StaleLeaderEpochCodeError",
    "StaleMetadata",
    "TooManyInFlightRequests",
    "UnrecognizedBrokerVersion",
    "UnsupportedCodecError",
]
__all__ += AIOKAFKA_MORE_NAMES
