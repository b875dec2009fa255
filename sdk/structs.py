"""aiokafka's ``aiokafka.structs`` names: the value types the clients hand out and take.

Code written for aiokafka imports them from here after changing the import
(``from sdk.structs import TopicPartition``); each is the class the SDK itself uses, not a copy.
"""

from __future__ import annotations

from sdk.client.cluster import BrokerMetadata, PartitionMetadata, TopicPartition
from sdk.consumer.records import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp
from sdk.producer.record_metadata import RecordMetadata

__all__ = [
    "BrokerMetadata",
    "ConsumerRecord",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "PartitionMetadata",
    "RecordMetadata",
    "TopicPartition",
]
