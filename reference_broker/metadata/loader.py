"""``MetadataLoader``: the raft listener that turns committed metadata into images.

Every committed batch is replayed into a ``MetadataDelta`` on the current image and the resulting
image is handed, with the delta, to each publisher (the broker's metadata publisher, the
controller's view). A snapshot replaces the image: whatever it does not state is gone. Publishers
are called in registration order, once per batch, on the event loop; one that raises is logged
and keeps receiving later images (a publisher's failure must not stop the node's metadata).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol

from reference_broker.metadata.delta import MetadataDelta
from reference_broker.metadata.image import MetadataImage

log = logging.getLogger("reference_broker.metadata")


class MetadataPublisher(Protocol):
    def publish(self, delta: MetadataDelta, image: MetadataImage) -> None: ...


class MetadataLoader:
    """Keeps ``image`` equal to the committed metadata log (Kafka's MetadataLoader)."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.publishers: list[MetadataPublisher] = []
        #: The raft leader as last told (None: unknown), and its epoch.
        self.leader_id: int | None = None
        self.leader_epoch = -1

    def install(self, publisher: MetadataPublisher) -> None:
        """Add ``publisher``; it is first called with the whole current image as a delta from empty."""
        self.publishers.append(publisher)
        if self.image.offset >= 0:
            catch_up = full_delta(self.image)
            publisher.publish(catch_up, self.image)

    def replay(self, records: Iterable[Any], last_offset: int, epoch: int) -> MetadataImage:
        """Apply one committed batch and publish the new image."""
        delta = MetadataDelta(self.image)
        for record in records:
            delta.replay(record)
        delta.offset = last_offset
        delta.epoch = epoch
        return self._publish(delta)

    # -- RaftListener --------------------------------------------------------------------------
    def handle_commit(self, batch: Any) -> None:
        self.replay(batch.records, batch.last_offset, batch.epoch)

    def handle_load_snapshot(self, snapshot: Any) -> None:
        delta = MetadataDelta(self.image)
        for record in snapshot.records:
            delta.replay(record)
        delta.finish_snapshot()
        delta.offset = snapshot.last_contained_offset
        delta.epoch = snapshot.epoch
        self._publish(delta)

    def handle_leader_change(self, leader: Any) -> None:
        self.leader_id = leader.leader_id
        self.leader_epoch = leader.epoch

    def _publish(self, delta: MetadataDelta) -> MetadataImage:
        image = delta.apply()
        self.image = image
        for publisher in self.publishers:
            try:
                publisher.publish(delta, image)
            except Exception:
                log.exception("metadata publisher %r failed at offset %d", publisher, image.offset)
        return image


def full_delta(image: MetadataImage) -> MetadataDelta:
    """A delta from the empty image to ``image``: every broker, controller and partition changed."""
    delta = MetadataDelta(MetadataImage())
    for broker_id, reg in image.brokers.items():
        delta._brokers[broker_id] = reg
    for controller_id, registration in image.controllers.items():
        delta._controllers[controller_id] = registration
    for topic_id, topic in image.topics_by_id.items():
        delta._topics[topic_id] = (topic.name, dict(topic.partitions))
        delta._created_topics.add(topic_id)
        delta.changed_partitions[topic_id] = set(topic.partitions)
    delta.offset = image.offset
    delta.epoch = image.epoch
    return delta
