"""Cluster mode: a topic the broker needs and the metadata lacks is asked of the active
controller, as Kafka's ``DefaultAutoTopicCreationManager`` asks it; the one owner of a broker's
auto-creations.

- For a client (a Metadata request naming an unknown topic) the CreateTopics goes in an Envelope
  naming that client (its principal and address, its client id and correlation id:
  ``envelope.sealed``), so the controller authorizes CREATE, and applies its checks, for the
  client, not for this broker (a super user on the controller listener). The broker's own check
  before it (``metadata_publisher``) only spares the controller a request it would refuse.
- For the broker itself (a FindCoordinator finding no ``__consumer_offsets`` or
  ``__transaction_state``) it goes bare, as Kafka's does without a request context.
- An internal topic is created with the settings of its coordinator (partitions, replication
  factor, configs), whoever asks; any other topic with ``num.partitions`` and the default
  replication factor.
- One creation per topic name is in flight at a time: asking for a topic whose creation is
  outstanding sends nothing (Kafka's ``inflightTopics``); the name is free again once the
  controller answered or no controller answered in time.

Nothing waits for the answer: clients ask again (Metadata, FindCoordinator) until the topic is
there.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from reference_broker.cluster.envelope import opened, sealed
from reference_broker.log.config import segment_size_configs
from reference_broker.storage import CONSUMER_OFFSETS, TRANSACTION_STATE
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import CreateTopicsRequest, CreateTopicsResponse

log = logging.getLogger("reference_broker.cluster")

#: The CreateTopics version sent to the controller (the newest Kafka 4.1 serves)
CREATE_TOPICS_VERSION = CreateTopicsRequest.VALID_VERSIONS[1]
#: The CreateTopics timeout (Kafka's sends ``request.timeout.ms``, 30 s by default)
CREATE_TIMEOUT_MS = 30_000


def internal_topic_settings(config: Any, topic_name: str) -> tuple[int, int, dict[str, str]]:
    """(partitions, replication factor, configs) of an internal topic, as Kafka creates it."""
    if topic_name == CONSUMER_OFFSETS:
        segments = segment_size_configs(int(config.get("offsets.topic.segment.bytes")))
        return (config.get("offsets.topic.num.partitions"), config.get("offsets.topic.replication.factor"),
                {"cleanup.policy": "compact", **segments})
    # Kafka's TransactionStateManager.transactionTopicConfigs
    segments = segment_size_configs(int(config.get("transaction.state.log.segment.bytes")))
    return (
        config.get("transaction.state.log.num.partitions"),
        config.get("transaction.state.log.replication.factor"),
        {"cleanup.policy": "compact", "min.insync.replicas": str(config.get("transaction.state.log.min.isr")),
         **segments},
    )


class AutoTopicCreation:
    """The auto-creations of one broker, at most one outstanding per topic name."""

    def __init__(self, broker: Any):
        self.broker = broker
        #: the topic names whose CreateTopics has not been answered yet
        self.inflight: set[str] = set()

    def create(self, name: str, ctx: Any | None) -> bool:
        """Ask the active controller to create ``name`` for the client of ``ctx`` (None: for
        this broker); False when a creation of ``name`` is already in flight (nothing sent)."""
        if name in self.inflight:
            return False
        self.inflight.add(name)
        asyncio.get_running_loop().create_task(self._send(name, ctx), name=f"auto-create {name}")
        return True

    def _request(self, name: str) -> CreateTopicsRequest:
        Topic = CreateTopicsRequest.CreatableTopic
        if name in (CONSUMER_OFFSETS, TRANSACTION_STATE):
            partitions, replication_factor, configs = internal_topic_settings(self.broker.config, name)
            topic = Topic(name=name, num_partitions=partitions, replication_factor=replication_factor,
                          configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                                   for k, v in configs.items()])
        else:
            topic = Topic(name=name, num_partitions=self.broker.config.get("num.partitions"),
                          replication_factor=-1)
        return CreateTopicsRequest(topics=[topic], timeout_ms=CREATE_TIMEOUT_MS)

    async def _send(self, name: str, ctx: Any | None) -> None:
        request = self._request(name)
        channel = self.broker.controller_channel
        try:
            if ctx is None:
                log.info("sending the auto-creation of topic %s to the active controller", name)
                answer = await channel.send(request)
            else:
                log.info("sending the auto-creation of topic %s to the active controller for %s",
                         name, ctx.connection.session.principal)

                def refused(code: int) -> CreateTopicsResponse:
                    return CreateTopicsResponse(topics=[
                        CreateTopicsResponse.CreatableTopicResult(name=name, error_code=code)])

                answer = await channel.send(
                    sealed(ctx, request, version=CREATE_TOPICS_VERSION),
                    unwrap=lambda response: opened(
                        response, CreateTopicsRequest.API_KEY, CREATE_TOPICS_VERSION, refused))
            for result in answer.topics:
                fine = result.error_code in (E.NONE, E.TOPIC_ALREADY_EXISTS)
                level = logging.INFO if fine else logging.WARNING
                log.log(level, "auto-creation of topic %s answered %s %s", result.name,
                        E(result.error_code).name, result.error_message or "")
        except Exception as exc:  # the client's next Metadata or FindCoordinator asks again
            log.info("auto-creating topic %s: %s", name, exc)
        finally:
            self.inflight.discard(name)
