"""The coordinators in cluster mode: where a group's coordinator is (Kafka's
``handleFindCoordinatorRequest``), offset commits acknowledged once replicated, and transaction
markers for partitions other nodes lead sent to them (``attach_remote_markers``).

The coordinator of group G is the leader of ``__consumer_offsets`` partition
``abs(hash(G)) % partitions``: a replicated topic the controller creates the first time a client
looks a group up, with ``offsets.topic.num.partitions`` partitions and
``offsets.topic.replication.factor`` replicas. Until it exists and that partition has an alive
leader the answer is COORDINATOR_NOT_AVAILABLE (the client asks again). The leader loads the
partition's groups when it becomes leader (``GroupCoordinatorService.on_leadership``); the group
requests are answered once the ISR holds what they wrote (``install_replicated_group_writes``).

The transaction coordinator of transactional id T is likewise the leader of
``__transaction_state`` partition ``abs(hash(T)) % partitions`` (Kafka's
``TransactionStateManager.partitionFor``), a compacted topic the controller creates with
``transaction.state.log.num.partitions`` partitions, ``transaction.state.log.replication.factor``
replicas and ``min.insync.replicas`` = ``transaction.state.log.min.isr``. Its leader loads the
partition's transactions on election (completing the prepared ones), with the partition's leader
epoch as the coordinator epoch of its markers, and drops them on resignation
(``TransactionCoordinatorService.on_leadership``); a change is applied, and answered, once the ISR
holds its record (``install_replicated_transaction_log``). A transactional produce to a partition
led elsewhere, and a TxnOffsetCommit at the group's coordinator, are checked with the
transaction's coordinator over the network (``attach_transaction_coordinator``).
"""

from __future__ import annotations

import logging
from typing import Any

from reference_broker.coordinator.group.records import partition_for
from reference_broker.coordinator.txn.records import partition_for as txn_partition_for
from reference_broker.metadata.image import MetadataImage
from reference_broker.storage import CONSUMER_OFFSETS, TRANSACTION_STATE
from sdk.protocol.errors import ErrorCode as E

log = logging.getLogger("reference_broker.cluster")

#: how long an offset commit waits for the ISR (Kafka's ``offsets.commit.timeout.ms`` default)
COMMIT_TIMEOUT_S = 5.0
#: (error code, message, node id, host, port) of a FindCoordinator answer for one key
CoordinatorAnswer = tuple[int, str | None, int, str, int]


def attach_group_coordinator(broker: Any) -> None:
    """Cluster mode: the group coordinator (``use_replicated_topic`` already called) follows the
    leadership of ``__consumer_offsets``."""
    service = broker.group_service

    def on_leadership(topic: str, partition: int, leads: bool) -> None:
        if topic == CONSUMER_OFFSETS:
            service.on_leadership(partition, leads)

    broker.metadata_publisher.coordinator_listeners.append(on_leadership)


def attach_remote_markers(broker: Any) -> None:
    """Cluster mode: transaction markers go to their partitions' leaders (this node's own ones
    in-process) and count once replicated."""
    from reference_broker.coordinator.txn.remote_markers import RemoteMarkers

    replicas = broker.replica_manager

    def leader_of(topic: str, partition: int) -> int | None:
        found = broker.metadata_publisher.image.topic(topic)
        registration = found.partitions.get(partition) if found is not None else None
        return registration.leader if registration is not None and registration.leader >= 0 else None

    def known_partition(topic: str, partition: int) -> bool:
        return broker.metadata_publisher.image.partition(topic, partition) is not None

    def is_local_leader(topic: str, partition: int) -> bool:
        part = replicas.partition(topic, partition)
        return part is not None and part.is_leader

    from reference_broker.cluster.inter_broker import inter_broker_security

    broker.txn_service.remote_markers = RemoteMarkers(
        leader_of=leader_of,
        known_partition=known_partition,
        is_local_leader=is_local_leader,
        channels=inter_broker_security(broker.config).channels(f"broker-{broker.node_id}-txn-markers",
                                                               local_host=broker.host or None),
        address_of=replicas.channels.address,
        write_local=broker.txn_service.write_replicated_marker,
        retry_markers=broker.txn_service.coordinator.retry_markers,
    )


def attach_transaction_coordinator(broker: Any) -> None:
    """Cluster mode: the transaction coordinator (``use_replicated_topic`` already called)
    follows the leadership of ``__transaction_state``, and asks the coordinating node about
    transactions it does not coordinate (produce to partitions led here, TxnOffsetCommit)."""
    from reference_broker.coordinator.txn.remote_verify import RemoteTxnVerifier

    service = broker.txn_service

    def on_leadership(topic: str, partition: int, leads: bool) -> None:
        if topic == TRANSACTION_STATE:
            found = broker.metadata_publisher.image.topic(TRANSACTION_STATE)
            count = len(found.partitions) if found is not None and found.partitions else None
            registration = found.partitions.get(partition) if found is not None else None
            # Kafka's coordinator epoch: the partition's leader epoch at this node's election
            epoch = registration.leader_epoch if registration is not None else 0
            service.on_leadership(partition, leads, count or service.coordinator.config.num_partitions, epoch)

    def coordinator_of(transactional_id: str) -> int | None:
        image: MetadataImage = broker.metadata_publisher.image
        topic = image.topic(TRANSACTION_STATE)
        if topic is None or not topic.partitions:
            return None
        partition = topic.partitions.get(txn_partition_for(transactional_id, len(topic.partitions)))
        return partition.leader if partition is not None and partition.leader >= 0 else None

    from reference_broker.cluster.inter_broker import inter_broker_security

    broker.metadata_publisher.coordinator_listeners.append(on_leadership)
    service.remote_verifier = RemoteTxnVerifier(
        coordinator_of=coordinator_of,
        channels=inter_broker_security(broker.config).channels(f"broker-{broker.node_id}-txn-verify",
                                                               local_host=broker.host or None),
        address_of=broker.replica_manager.channels.address,
    )


def find_group_coordinator(broker: Any, listener: str, group_id: str) -> CoordinatorAnswer:
    """The leader of ``group_id``'s ``__consumer_offsets`` partition, its endpoint on ``listener``."""
    return _find_coordinator(broker, listener, CONSUMER_OFFSETS, group_id)


def find_transaction_coordinator(broker: Any, listener: str, transactional_id: str) -> CoordinatorAnswer:
    """The leader of ``transactional_id``'s ``__transaction_state`` partition, its endpoint on
    ``listener`` (Kafka's ``handleFindCoordinatorRequest`` for TRANSACTION keys)."""
    return _find_coordinator(broker, listener, TRANSACTION_STATE, transactional_id)


_NOT_AVAILABLE: CoordinatorAnswer = (
    E.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1, "", -1
)


def _find_coordinator(broker: Any, listener: str, topic_name: str, key: str) -> CoordinatorAnswer:
    image: MetadataImage = broker.metadata_publisher.image
    topic = image.topic(topic_name)
    if topic is None or not topic.partitions:
        broker.auto_topic_creation.create(topic_name, None)
        return _NOT_AVAILABLE
    partition_of = partition_for if topic_name == CONSUMER_OFFSETS else txn_partition_for
    index = partition_of(key, len(topic.partitions))
    partition = topic.partitions.get(index)
    leader = image.brokers.get(partition.leader) if partition is not None else None
    endpoint = leader.endpoint(listener) if leader is not None and not leader.fenced else None
    if leader is None or endpoint is None:
        return _NOT_AVAILABLE
    return E.NONE, None, leader.id, endpoint.host, endpoint.port


def install_replicated_group_writes(registry: Any) -> None:
    """The group coordinator's requests in cluster mode are answered once the ISR holds what they
    wrote and whatever was written to the group's ``__consumer_offsets`` partition before
    (Kafka's CoordinatorRuntime completes a write, even one without records, when the high
    watermark passes the partition's last written offset, waiting up to
    ``offsets.commit.timeout.ms``, 5 s by default), so an answered commit or assignment
    survives the loss of the coordinator's node. A write not committed in time is answered
    COORDINATOR_NOT_AVAILABLE, one whose partition moved NOT_COORDINATOR (the client finds the
    coordinator again); OffsetCommit's partitions that were refused keep their own error."""
    import dataclasses
    import inspect

    from sdk.protocol.messages import (
        ConsumerGroupHeartbeatRequest,
        HeartbeatRequest,
        JoinGroupRequest,
        LeaveGroupRequest,
        OffsetCommitRequest,
        OffsetDeleteRequest,
        SyncGroupRequest,
    )

    def commit_failed(handler: Any, request: Any, response: Any, version: int, code: int) -> Any:
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code == E.NONE:
                    p.error_code = code
        return response

    def answer_failed(handler: Any, request: Any, response: Any, version: int, code: int) -> Any:
        if handler.error_response is None:
            response.error_code = code
            return response
        return handler.error_response(request, version, code)

    def commit_succeeded(response: Any) -> bool:
        return any(p.error_code == E.NONE for t in response.topics for p in t.partitions)

    def succeeded(response: Any) -> bool:
        return bool(response.error_code == E.NONE)

    wrapped = {
        OffsetCommitRequest.API_KEY: (commit_succeeded, commit_failed),
        OffsetDeleteRequest.API_KEY: (succeeded, answer_failed),
        JoinGroupRequest.API_KEY: (succeeded, answer_failed),
        SyncGroupRequest.API_KEY: (succeeded, answer_failed),
        HeartbeatRequest.API_KEY: (succeeded, answer_failed),
        LeaveGroupRequest.API_KEY: (succeeded, answer_failed),
        ConsumerGroupHeartbeatRequest.API_KEY: (succeeded, answer_failed),
    }
    handlers = registry._handlers
    for api_key, (ok, failed) in wrapped.items():
        handler = handlers.get(api_key)
        if handler is None:
            continue

        def make(handler: Any, ok: Any, failed: Any) -> Any:
            inner = handler.handle

            async def answered_once_replicated(broker: Any, ctx: Any, request: Any) -> Any:
                response = inner(broker, ctx, request)
                if inspect.isawaitable(response):
                    response = await response
                if ok(response):
                    code = await broker.group_service.wait_replicated(request.group_id, COMMIT_TIMEOUT_S)
                    if code:
                        return failed(handler, request, response, ctx.api_version, code)
                return response

            return answered_once_replicated

        handlers[api_key] = dataclasses.replace(
            handler, handle=make(handler, ok, failed), synchronous=False
        )


def install_replicated_transaction_log(registry: Any) -> None:
    """InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn in cluster mode answer once
    the ISR holds what they wrote to ``__transaction_state`` (Kafka's ``appendTransactionToLog``
    appends with acks=all), so a node taking the partition over knows every answered change."""
    import dataclasses
    import inspect

    from sdk.protocol.messages import (
        AddOffsetsToTxnRequest,
        AddPartitionsToTxnRequest,
        EndTxnRequest,
        InitProducerIdRequest,
    )

    def plain(response: Any, code: int) -> None:
        response.error_code = code

    def add_partitions(response: Any, code: int) -> None:
        for topic in response.results_by_topic_v3_and_below:
            for p in topic.results_by_partition:
                if p.partition_error_code == E.NONE:
                    p.partition_error_code = code
        for txn in response.results_by_transaction:
            for topic in txn.topic_results:
                for p in topic.results_by_partition:
                    if p.partition_error_code == E.NONE:
                        p.partition_error_code = code

    def add_partitions_ok(response: Any) -> bool:
        topics = list(response.results_by_topic_v3_and_below)
        topics += [t for txn in response.results_by_transaction for t in txn.topic_results]
        return any(p.partition_error_code == E.NONE for t in topics for p in t.results_by_partition)

    def ids_of_add_partitions(request: Any) -> list[str]:
        if request.transactions:
            return [t.transactional_id for t in request.transactions if not t.verify_only]
        return [request.v3_and_below_transactional_id]

    wrapped = {
        InitProducerIdRequest.API_KEY: (lambda r: [r.transactional_id] if r.transactional_id else [],
                                        lambda resp: resp.error_code == E.NONE, plain),
        AddOffsetsToTxnRequest.API_KEY: (lambda r: [r.transactional_id],
                                         lambda resp: resp.error_code == E.NONE, plain),
        EndTxnRequest.API_KEY: (lambda r: [r.transactional_id],
                                lambda resp: resp.error_code == E.NONE, plain),
        AddPartitionsToTxnRequest.API_KEY: (ids_of_add_partitions, add_partitions_ok, add_partitions),
    }
    handlers = registry._handlers
    for api_key, (ids_of, succeeded, set_error) in wrapped.items():
        handler = handlers[api_key]

        def make(inner: Any, ids_of: Any, succeeded: Any, set_error: Any) -> Any:
            async def answered_once_replicated(broker: Any, ctx: Any, request: Any) -> Any:
                response = inner(broker, ctx, request)
                if inspect.isawaitable(response):
                    response = await response
                if succeeded(response):
                    for transactional_id in ids_of(request):
                        code = await broker.txn_service.wait_replicated(transactional_id, COMMIT_TIMEOUT_S)
                        if code:
                            set_error(response, code)
                            break
                return response

            return answered_once_replicated

        handlers[api_key] = dataclasses.replace(
            handler, handle=make(handler.handle, ids_of, succeeded, set_error), synchronous=False
        )
