"""The sink creates its own marker and intent topics (CreateTopics, with the configs their use
needs) rather than counting on the broker to auto-create them: checked on a broker started with
``auto.create.topics.enable=false``, where the output topic is created by the test beforehand
(with confluent-kafka's admin client, as an operator would)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from spark_integration import FORMAT
from tests.spark_integration.helpers import read_topic


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = _admin(bootstrap)
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)


def _config(bootstrap: str, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = _admin(bootstrap)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: entry.value for name, entry in entries.items()}


def test_the_sink_creates_its_topics_on_a_broker_that_auto_creates_none(
    spark: Any, broker_factory: Any
) -> None:
    broker = broker_factory({"auto.create.topics.enable": False, "num.partitions": 2})
    tag = uuid.uuid4().hex[:8]
    output, markers, intents = f"out-{tag}", f"markers-{tag}", f"intents-{tag}"
    _create(broker.bootstrap, output, 2)
    frame = spark.range(0, 100, numPartitions=2).selectExpr("CAST(id AS STRING) AS value")
    for mode in ("per-task", "two-phase"):
        (frame.write.format(FORMAT)
         .option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", output)
         .option("transactional.id.prefix", f"create-{tag}")
         .option("marker.topic", markers)
         .option("intent.topic", intents)
         .option("commit.mode", mode)
         .mode("append").save())
    assert sorted(int(r.value or b"") for r in read_topic(broker.bootstrap, output)) == sorted(
        i for i in range(100) for _ in range(2))

    topics = _admin(broker.bootstrap).list_topics(timeout=30).topics
    assert len(topics[markers].partitions) == 1
    marker_config = _config(broker.bootstrap, markers)
    assert (marker_config["cleanup.policy"], marker_config["retention.ms"]) == ("delete", "-1")
    assert _config(broker.bootstrap, intents)["cleanup.policy"] == "compact"


def test_bad_sink_topic_and_prefix_options_get_errors_that_name_them() -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    from spark_integration.options import OptionError
    from spark_integration.writer import SinkOptions

    schema = StructType([StructField("value", BinaryType())])
    base = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t"}
    for name, value in (("sink.topics.replication.factor", "0"), ("sink.topics.replication.factor", "two"),
                        ("sink.topics.min.insync.replicas", "0"), ("transactional.id.prefix", " ")):
        with pytest.raises(OptionError, match=re.escape(name)):
            SinkOptions.parse({**base, name: value}, schema)
    parsed = SinkOptions.parse({**base, "sink.topics.replication.factor": "3",
                                "sink.topics.min.insync.replicas": "2", "commit.mode": "two-phase"}, schema)
    specs = parsed.topic_specs()
    assert [(s.replication_factor, s.configs["min.insync.replicas"]) for s in specs] == [(3, "2")] * 2
