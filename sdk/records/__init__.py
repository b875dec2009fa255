"""Kafka record batches (magic v2), sans-IO: build, read, validate, compress, partition-hash.

Shared by the SDK's producer/consumer and the reference broker; nothing here does I/O. See
docs/ARCHITECTURE.md ("sdk.records") for the contract.
"""

from sdk.records.batch import Record, RecordBatch, iter_batches
from sdk.records.builder import RecordBatchBuilder, encode_headers
from sdk.records.compression import Compression, compress, decompress, decompression_limit
from sdk.records.control import (
    ControlRecord,
    ControlType,
    build_control_batch,
    control_record_key,
    end_txn_marker_value,
    parse_control_record,
)
from sdk.records.errors import (
    CorruptRecordError,
    CrcMismatchError,
    DecompressionError,
    DecompressionLimitError,
    InvalidBatchLengthError,
    InvalidControlRecordError,
    InvalidMagicError,
    InvalidRecordCountError,
    InvalidRecordError,
    InvalidVarintError,
    TruncatedBatchError,
    UnsupportedCompressionError,
)
from sdk.records.header import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    assign_offsets,
    read_batch_header,
    set_log_append_time,
    set_max_timestamp,
    set_partition_leader_epoch,
)
from sdk.records.murmur2 import murmur2, murmur2_partition
from sdk.records.sizes import BATCH_OVERHEAD, LOG_OVERHEAD, RECORD_OVERHEAD, headers_size, record_size_bound
from sdk.records.walker import RecordsWalk, walk_batch_records, walk_records

__all__ = [
    "BATCH_HEADER_SIZE",
    "BATCH_OVERHEAD",
    "LOG_OVERHEAD",
    "RECORD_OVERHEAD",
    "BatchHeader",
    "Compression",
    "ControlRecord",
    "ControlType",
    "CorruptRecordError",
    "CrcMismatchError",
    "DecompressionError",
    "DecompressionLimitError",
    "InvalidBatchLengthError",
    "InvalidControlRecordError",
    "InvalidMagicError",
    "InvalidRecordCountError",
    "InvalidRecordError",
    "InvalidVarintError",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "RecordsWalk",
    "TruncatedBatchError",
    "UnsupportedCompressionError",
    "assign_offsets",
    "build_control_batch",
    "compress",
    "control_record_key",
    "decompress",
    "decompression_limit",
    "encode_headers",
    "end_txn_marker_value",
    "headers_size",
    "iter_batches",
    "murmur2",
    "murmur2_partition",
    "parse_control_record",
    "read_batch_header",
    "record_size_bound",
    "set_log_append_time",
    "set_max_timestamp",
    "set_partition_leader_epoch",
    "walk_batch_records",
    "walk_records",
]
