"""Asyncio Kafka client SDK built on a sans-IO protocol core (``sdk.protocol``, ``sdk.records``).

``sdk.Producer`` is the asyncio producer (``sdk.AIOKafkaProducer`` for code written for
aiokafka), ``sdk.Consumer`` the asyncio consumer; ``sdk.sync`` has their blocking facades. Every
error the SDK raises is in ``sdk.errors`` and derives from ``sdk.errors.KafkaError``.

Names are resolved lazily (PEP 562): importing ``sdk.protocol`` or ``sdk.records`` (as the
reference broker does) loads no client code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sdk._lazy import lazy_attributes

if TYPE_CHECKING:
    from sdk import errors, structs
    from sdk.admin import AdminClient, AIOKafkaAdminClient
    from sdk.client import KafkaClient, TopicPartition
    from sdk.client.config import ClientConfig
    from sdk.consumer import (
        Consumer,
        ConsumerGroupMetadata,
        ConsumerInterceptor,
        ConsumerRebalanceListener,
        ConsumerRecord,
        OffsetAndMetadata,
        OffsetAndTimestamp,
    )
    from sdk.consumer import Consumer as AIOKafkaConsumer
    from sdk.consumer.errors import ConsumerStoppedError
    from sdk.errors import (
        BufferExhaustedError,
        ConfigError,
        DeliveryTimeoutError,
        IllegalOperation,
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
        PreparedTxnState,
        Producer,
        ProducerInterceptor,
        ProducerRecord,
        RecordMetadata,
        RoundRobinPartitioner,
    )
    from sdk.producer import Producer as AIOKafkaProducer

__version__ = "0.1.0"

#: Public name -> (module, attribute in it).
_LAZY: dict[str, tuple[str, str]] = {
    "errors": ("sdk.errors", ""),
    "structs": ("sdk.structs", ""),
    "ConsumerStoppedError": ("sdk.consumer.errors", "ConsumerStoppedError"),
    "KafkaClient": ("sdk.client", "KafkaClient"),
    "TopicPartition": ("sdk.client", "TopicPartition"),
    "ClientConfig": ("sdk.client.config", "ClientConfig"),
    **{
        name: ("sdk.errors", name)
        for name in (
            "BufferExhaustedError",
            "ConfigError",
            "DeliveryTimeoutError",
            "IllegalOperation",
            "IllegalStateError",
            "InvalidPartitionError",
            "KafkaConnectionError",
            "KafkaError",
            "KafkaTimeoutError",
            "MetadataTimeoutError",
            "NoBrokersAvailableError",
            "ProducerClosedError",
            "RecordTooLargeError",
            "SerializationError",
            "TransactionsNotImplementedError",
        )
    },
    **{
        name: ("sdk.producer", name)
        for name in (
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
        )
    },
    "AIOKafkaProducer": ("sdk.producer", "Producer"),
    **{
        name: ("sdk.consumer", name)
        for name in (
            "Consumer",
            "ConsumerGroupMetadata",
            "ConsumerInterceptor",
            "ConsumerRebalanceListener",
            "ConsumerRecord",
            "OffsetAndMetadata",
            "OffsetAndTimestamp",
        )
    },
    "AIOKafkaConsumer": ("sdk.consumer", "Consumer"),
    **{name: ("sdk.admin", name) for name in ("AdminClient", "AIOKafkaAdminClient")},
}

__all__ = [
    "AIOKafkaAdminClient",
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "AdminClient",
    "BatchMetadata",
    "BufferExhaustedError",
    "CallablePartitioner",
    "ClientConfig",
    "ConfigError",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerInterceptor",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerStoppedError",
    "DefaultPartitioner",
    "DeliveryTimeoutError",
    "IllegalOperation",
    "IllegalStateError",
    "InvalidPartitionError",
    "KafkaClient",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "MetadataTimeoutError",
    "Murmur2RandomPartitioner",
    "NoBrokersAvailableError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetRange",
    "Partitioner",
    "PreparedTxnState",
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
    "structs",
]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
