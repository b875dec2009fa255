"""DescribeLogDirs (key 35): the log directory, each partition's size in it, and the disk's space.

``kafka-log-dirs --describe`` and ``Admin.describeLogDirs`` read it. As Kafka's KafkaApis and
``ReplicaManager.describeLogDirs``: it needs DESCRIBE on the cluster (else the top-level error is
CLUSTER_AUTHORIZATION_FAILED and no directory is listed); a null topic list means every partition,
otherwise only the named partitions that exist here are listed (a missing one is left out, not an
error); the offset lag of a current (not future) replica is its high watermark minus its log end
offset, never below 0, so always 0 on this single node; ``TotalBytes``/``UsableBytes`` are the
file system's, as Java's ``FileStore`` reports them. This broker keeps every partition in its one
data directory and has no future replicas (no ``alterReplicaLogDirs``).
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from reference_broker.handlers.auth import Operation, authorize_cluster
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import DescribeLogDirsRequest, DescribeLogDirsResponse

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

API_KEY = DescribeLogDirsRequest.API_KEY

Response = DescribeLogDirsResponse
Result = DescribeLogDirsResponse.DescribeLogDirsResult
Topic = DescribeLogDirsResponse.DescribeLogDirsResult.DescribeLogDirsTopic
Partition = DescribeLogDirsResponse.DescribeLogDirsResult.DescribeLogDirsTopic.DescribeLogDirsPartition


def _wanted(broker: Broker, request: DescribeLogDirsRequest) -> dict[str, list[int]]:
    """Topic -> partitions to list: everything for a null topic list, else the named ones that
    exist."""
    if request.topics is None:
        return {info.name: list(range(info.num_partitions)) for info in broker.logs.topics()}
    wanted: dict[str, set[int]] = {}
    for entry in request.topics:
        info = broker.logs.topic(entry.topic)
        if info is not None:
            wanted.setdefault(entry.topic, set()).update(
                p for p in entry.partitions if 0 <= p < info.num_partitions
            )
    return {name: sorted(parts) for name, parts in wanted.items() if parts}


def handle(broker: Broker, ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not authorize_cluster(broker, ctx, Operation.DESCRIBE):
        return Response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    log_dir = broker.logs.log_dir.resolve()
    topics = [
        Topic(
            name=name,
            partitions=[
                Partition(
                    partition_index=p,
                    partition_size=broker.logs.partition_size(name, p),
                    offset_lag=0,
                    is_future_key=False,
                )
                for p in partitions
            ],
        )
        for name, partitions in sorted(_wanted(broker, request).items())
    ]
    disk = shutil.disk_usage(log_dir)
    return Response(
        results=[
            Result(
                error_code=ErrorCode.NONE,
                log_dir=str(log_dir),
                topics=topics,
                total_bytes=disk.total,
                usable_bytes=disk.free,
            )
        ]
    )


def error_response(request: DescribeLogDirsRequest, version: int, code: int) -> DescribeLogDirsResponse:
    """v3+ carries a top-level error; before it, one result with the error and no directory."""
    if version >= 3:
        return Response(error_code=code, results=[])
    return Response(results=[Result(error_code=code, log_dir="", topics=[])])


def install(registry: HandlerRegistry) -> None:
    # v5 (IsCordoned) is beyond Kafka 4.1, which serves 1-4.
    registry.register(API_KEY, handle, versions=(1, 4), error_response=error_response)
