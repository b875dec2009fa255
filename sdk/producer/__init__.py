"""The asyncio producer and its parts (accumulator, sender, idempotence, partitioners, interceptors)."""

from sdk.producer.interceptors import ProducerInterceptor, ProducerRecord
from sdk.producer.partitioner import (
    CallablePartitioner,
    DefaultPartitioner,
    Murmur2RandomPartitioner,
    Partitioner,
    RoundRobinPartitioner,
)
from sdk.producer.prepared_state import PreparedTxnState
from sdk.producer.producer import Producer
from sdk.producer.record_metadata import BatchMetadata, OffsetRange, RecordMetadata
from sdk.producer.transaction_manager import FATAL_TRANSACTION_ERRORS, TransactionState

__all__ = [
    "FATAL_TRANSACTION_ERRORS",
    "BatchMetadata",
    "CallablePartitioner",
    "DefaultPartitioner",
    "Murmur2RandomPartitioner",
    "OffsetRange",
    "Partitioner",
    "PreparedTxnState",
    "Producer",
    "ProducerInterceptor",
    "ProducerRecord",
    "RecordMetadata",
    "RoundRobinPartitioner",
    "TransactionState",
]
