"""Asyncio Kafka client SDK built on a sans-IO protocol core (``sdk.protocol``, ``sdk.records``).

``sdk.Producer`` is the asyncio producer; ``sdk.sync.Producer`` its blocking facade. Every error
the SDK raises is in ``sdk.errors`` and derives from ``sdk.errors.KafkaError``.
"""

from sdk import errors
from sdk.client import KafkaClient, TopicPartition
from sdk.errors import (
    BufferExhaustedError,
    ConfigError,
    DeliveryTimeoutError,
    IllegalStateError,
    InvalidPartitionError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MetadataTimeoutError,
    NoBrokersAvailableError,
    ProducerClosedError,
    RecordTooLargeError,
    SerializationError,
    TransactionsNotImplementedError,
)
from sdk.producer import (
    BatchMetadata,
    CallablePartitioner,
    DefaultPartitioner,
    Murmur2RandomPartitioner,
    OffsetRange,
    Partitioner,
    Producer,
    ProducerInterceptor,
    ProducerRecord,
    RecordMetadata,
    RoundRobinPartitioner,
)

__version__ = "0.1.0"

__all__ = [
    "BatchMetadata",
    "BufferExhaustedError",
    "CallablePartitioner",
    "ConfigError",
    "DefaultPartitioner",
    "DeliveryTimeoutError",
    "IllegalStateError",
    "InvalidPartitionError",
    "KafkaClient",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "MetadataTimeoutError",
    "Murmur2RandomPartitioner",
    "NoBrokersAvailableError",
    "OffsetRange",
    "Partitioner",
    "Producer",
    "ProducerClosedError",
    "ProducerInterceptor",
    "ProducerRecord",
    "RecordMetadata",
    "RecordTooLargeError",
    "RoundRobinPartitioner",
    "SerializationError",
    "TopicPartition",
    "TransactionsNotImplementedError",
    "errors",
]
