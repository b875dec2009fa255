"""Other Kafka clients' record code, used as oracles (imported quietly: kafka-python's import
emits DeprecationWarnings from its own schema loading)."""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import codec as kafka_codec
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2
    from kafka.record.default_records import DefaultRecordBatch as KafkaBatch
    from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaBuilder
    from kafka.record.memory_records import MemoryRecords as KafkaMemoryRecords

from aiokafka.record.control_record import ControlRecord as AioControlRecord
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords

__all__ = [
    "AioBatch",
    "AioBuilder",
    "AioControlRecord",
    "AioMemoryRecords",
    "KafkaBatch",
    "KafkaBuilder",
    "KafkaMemoryRecords",
    "kafka_codec",
    "kafka_python_murmur2",
]
