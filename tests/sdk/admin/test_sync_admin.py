"""The blocking AdminClient (``sdk.sync.AdminClient``) on both brokers, read back by confluent-kafka."""

from __future__ import annotations

from typing import Any

import confluent_kafka
import pytest

from sdk.admin import NewPartitions, NewTopic, OffsetSpec
from sdk.client.cluster import TopicPartition
from sdk.errors import ConfigError, IllegalStateError, UnknownTopicOrPartitionError
from sdk.sync import AdminClient

from .conftest import Cluster, oracle_topic, wait_for


def test_sync_admin_creates_grows_describes_and_deletes(cluster: Cluster, name: Any) -> None:
    topic = name("sync")
    with AdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        assert admin.create_topics([NewTopic(topic, 2, 1)]) == {topic: None}
        wait_for(lambda: oracle_topic(cluster, topic), topic)
        assert admin.create_partitions({topic: NewPartitions(4)}) == {topic: None}
        wait_for(lambda: len(oracle_topic(cluster, topic).partitions) == 4, "4 partitions")
        assert len(admin.describe_topics([topic])[topic].partitions) == 4
        assert topic in admin.list_topics()
        oracle = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        assert admin.describe_cluster().cluster_id == oracle.list_topics(timeout=10).cluster_id
        confluent = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        for partition in range(4):
            confluent.produce(topic, value=b"x", partition=partition)
        assert confluent.flush(30) == 0
        tps = [TopicPartition(topic, p) for p in range(4)]
        assert {
            tp: r.offset for tp, r in admin.list_offsets(dict.fromkeys(tps, OffsetSpec.latest())).items()
        } == dict.fromkeys(tps, 1)
        assert admin.delete_records({tps[0]: 1})[tps[0]].low_watermark == 1
        group = name("g")
        assert admin.alter_consumer_group_offsets(group, {tps[1]: 1}) == {tps[1]: None}
        assert admin.list_consumer_group_offsets(group)[tps[1]].offset == 1
        assert admin.consumer_lag(group)[tps[1]].lag == 0
        assert admin.delete_consumer_groups([group]) == {group: None}
        assert admin.delete_topics([topic]) == {topic: None}
        wait_for(lambda: oracle_topic(cluster, topic) is None, f"{topic} gone")
        assert isinstance(admin.delete_topics([topic])[topic], UnknownTopicOrPartitionError)


def test_sync_admin_settings_and_state_errors() -> None:
    with pytest.raises(ConfigError, match="no_such_setting"):
        AdminClient(bootstrap_servers="127.0.0.1:9", no_such_setting=1)
    with pytest.raises(ConfigError, match="default_api_timeout_ms"):
        AdminClient(bootstrap_servers="127.0.0.1:9", default_api_timeout_ms=0)
    admin = AdminClient(bootstrap_servers="127.0.0.1:9")
    with pytest.raises(IllegalStateError, match="start"):
        admin.list_topics()
