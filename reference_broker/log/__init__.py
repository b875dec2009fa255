"""The broker's storage layer: Kafka-style partition logs on local files (synchronous I/O).

Public API:

* :class:`LogConfig` (``config``): per-log settings with Kafka's names, defaults and validation.
* :class:`LogManager` (``log_manager``): every partition of a data directory plus topic metadata
  (create/delete topics, add partitions, config overrides, periodic retention/flush, shutdown).
* :class:`PartitionLog` (``partition_log``): one partition; ``append``/``append_control``,
  ``read``/``read_slices``, offset lookups, ``delete_records_before``, ``apply_retention``,
  ``flush``, ``close``, ``delete``. Results: :class:`AppendResult`, :class:`ReadResult`,
  :class:`SliceReadResult`.
* :class:`AppendOrigin` (``producer_state``): CLIENT for produce requests, COORDINATOR for the
  broker's own writes (transaction markers, offset commits).

Errors are ``sdk.protocol.errors`` exceptions carrying the Kafka error code; each module's
docstring lists what it raises and when. An append refused for some of its records (keyless
records on a compacted topic, timestamps out of range) names each of them:
:func:`record_errors_of` gives its :class:`RecordError` list (KIP-467).
"""

from reference_broker.log.config import LogConfig
from reference_broker.log.index import AbortedTxn
from reference_broker.log.log_manager import LogManager, TopicMetadata
from reference_broker.log.partition_log import PartitionLog
from reference_broker.log.producer_state import AppendOrigin
from reference_broker.log.results import (
    AppendResult,
    FileSlice,
    ReadResult,
    RecordError,
    SliceReadResult,
    record_errors_of,
)
from reference_broker.log.segment import Corruption

__all__ = [
    "AbortedTxn",
    "AppendOrigin",
    "AppendResult",
    "Corruption",
    "FileSlice",
    "LogConfig",
    "LogManager",
    "PartitionLog",
    "ReadResult",
    "RecordError",
    "SliceReadResult",
    "TopicMetadata",
    "record_errors_of",
]
