"""The blocking AdminClient (``sdk.sync.AdminClient``) on both brokers, read back by confluent-kafka."""

from __future__ import annotations

from typing import Any

import confluent_kafka
import pytest

from sdk.admin import NewPartitions, NewTopic
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
