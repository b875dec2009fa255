"""How the transactional producer classifies a coordinator's answer (Java's
``TransactionManager`` handlers): retried as it is, retried after finding the coordinator again,
abortable (the transaction must be aborted, the producer stays usable), abortable with an epoch
bump at the abort (KIP-360), or fatal (only closing the producer is left).

The coordinator channel (``sdk.producer.transaction_requests``) retries; the operations
(``sdk.producer.transaction_operations``) record what is left as the transaction's error.
"""

from __future__ import annotations

from sdk.errors import ErrorCode, KafkaError, ProducerFencedError, make_error
from sdk.producer.transaction_manager import FATAL_TRANSACTION_ERRORS

__all__ = [
    "CONCURRENT_TRANSACTIONS_BACKOFF_MS",
    "RETRIED_CODES",
    "coordinator_error",
    "is_fatal",
    "needs_bump",
]

#: Answers retried as they are (besides the coordinator errors, which also re-find it).
RETRIED_CODES = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.OPERATION_NOT_ATTEMPTED,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
)
#: Coordinator answers after which this producer cannot go on (besides FATAL_TRANSACTION_ERRORS).
_FATAL_CODES = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_TXN_STATE,
        ErrorCode.TRANSACTION_COORDINATOR_FENCED,
        ErrorCode.INVALID_TRANSACTION_TIMEOUT,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    }
)
#: Abortable answers that also leave the producer id unknown to the coordinator or the partition
#: leaders: the abort then gets a new epoch.
_BUMP_CODES = frozenset({ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.UNKNOWN_PRODUCER_ID})
#: Backoff for CONCURRENT_TRANSACTIONS: the previous EndTxn completes in milliseconds (Java's
#: producer uses 20 ms for the first AddPartitionsToTxn of a transaction).
CONCURRENT_TRANSACTIONS_BACKOFF_MS = 20


def coordinator_error(code: int, what: str, message: str | None = None) -> KafkaError:
    """The exception for a coordinator's answer; an old epoch means a newer producer took over."""
    text = f"{what}: {message}" if message else what
    if code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
        fenced = ProducerFencedError(
            f"{text}: a newer producer with the same transactional id has fenced this one "
            f"({ErrorCode(code).name})"
        )
        return fenced
    return make_error(code, text)


def is_fatal(error: BaseException) -> bool:
    """Whether ``error``, met by a transactional request, leaves the producer unusable."""
    if isinstance(error, FATAL_TRANSACTION_ERRORS):
        return True
    return isinstance(error, KafkaError) and error.code in _FATAL_CODES


def needs_bump(error: BaseException) -> bool:
    """Whether ``error`` left the producer id unknown, so the abort must bump the epoch."""
    return isinstance(error, KafkaError) and error.code in _BUMP_CODES
