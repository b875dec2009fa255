"""The controller's topic config changes (AlterConfigs, IncrementalAlterConfigs) driven sans-IO:
the ConfigRecords each request produces, committed at once as by a one-voter quorum, and the
image the brokers apply."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from reference_broker import internal_records as rec
from reference_broker.controller.quorum_controller import QuorumController
from reference_broker.controller.settings import ControllerSettings
from reference_broker.log.config import LogConfig
from reference_broker.metadata.image import CONFIG_TOPIC
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import AlterConfigsRequest, IncrementalAlterConfigsRequest

pytestmark = pytest.mark.unit

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class Controller:
    def __init__(self, log_defaults: LogConfig | None = None) -> None:
        settings = ControllerSettings(node_id=1, log_defaults=log_defaults or LogConfig())
        self.core = QuorumController(settings)
        self.end_offset = -1
        self.appended: list[list[Any]] = []

    def commit(self, records: list[Any]) -> None:
        self.core.begin(records)
        self.end_offset += len(records)
        self.core.replay_commit(records, self.end_offset, 1)
        self.appended.append(records)

    def topic(self, name: str, configs: dict[str, str] | None = None) -> None:
        topic_id = uuid.uuid4()
        self.commit(
            [
                rec.TopicRecord(name=name, topic_id=topic_id),
                *(
                    rec.ConfigRecord(resource_type=CONFIG_TOPIC, resource_name=name, name=k, value=v)
                    for k, v in (configs or {}).items()
                ),
                rec.PartitionRecord(
                    partition_id=0, topic_id=topic_id, replicas=[1], isr=[1], leader=1, directories=[]
                ),
            ]
        )

    def incremental(
        self, name: str, ops: Sequence[tuple[str, int, str | None]], validate_only: bool = False
    ) -> tuple[int, str | None, list[Any]]:
        Resource = IncrementalAlterConfigsRequest.AlterConfigsResource
        request = IncrementalAlterConfigsRequest(
            resources=[
                Resource(
                    resource_type=CONFIG_TOPIC,
                    resource_name=name,
                    configs=[
                        Resource.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops
                    ],
                )
            ],
            validate_only=validate_only,
        )
        return self._run(self.core.configs.alter_configs(request, incremental=True))

    def replace(self, name: str, configs: dict[str, str | None]) -> tuple[int, str | None, list[Any]]:
        Resource = AlterConfigsRequest.AlterConfigsResource
        request = AlterConfigsRequest(
            resources=[
                Resource(
                    resource_type=CONFIG_TOPIC,
                    resource_name=name,
                    configs=[Resource.AlterableConfig(name=k, value=v) for k, v in configs.items()],
                )
            ]
        )
        return self._run(self.core.configs.alter_configs(request, incremental=False))

    def _run(self, result: Any) -> tuple[int, str | None, list[Any]]:
        if result.records:
            self.commit(list(result.records))
        (answer,) = result.response.responses
        return answer.error_code, answer.error_message, list(result.records)

    def overrides(self, name: str) -> dict[str, str]:
        return dict(self.core.image.topic_config(name))


def config_record(topic: str, name: str, value: str | None) -> Any:
    return rec.ConfigRecord(resource_type=CONFIG_TOPIC, resource_name=topic, name=name, value=value)


def test_incremental_changes_become_one_record_per_changed_key() -> None:
    ctl = Controller()
    ctl.topic("t", {"retention.ms": "1000", "cleanup.policy": "delete"})
    code, _, records = ctl.incremental(
        "t",
        [("retention.ms", DELETE, None), ("cleanup.policy", APPEND, "compact"), ("segment.ms", SET, "60000")],
    )
    assert code == ErrorCode.NONE
    assert records == [
        config_record("t", "cleanup.policy", "delete,compact"),
        config_record("t", "retention.ms", None),
        config_record("t", "segment.ms", "60000"),
    ]
    assert ctl.overrides("t") == {"cleanup.policy": "delete,compact", "segment.ms": "60000"}
    # Setting what is already set changes nothing: no record.
    assert ctl.incremental("t", [("segment.ms", SET, "60000")]) == (ErrorCode.NONE, None, [])


def test_alter_configs_replaces_the_whole_set() -> None:
    ctl = Controller()
    ctl.topic("t", {"retention.ms": "1000", "cleanup.policy": "compact"})
    code, _, records = ctl.replace("t", {"retention.ms": "2000", "min.insync.replicas": "2"})
    assert code == ErrorCode.NONE
    assert records == [
        config_record("t", "cleanup.policy", None),
        config_record("t", "min.insync.replicas", "2"),
        config_record("t", "retention.ms", "2000"),
    ]
    assert ctl.overrides("t") == {"retention.ms": "2000", "min.insync.replicas": "2"}


@pytest.mark.parametrize(
    ("ops", "code", "named"),
    [
        (
            [("retention.ms", SET, "1"), ("segment.bytes", SET, "lots")],
            ErrorCode.INVALID_CONFIG,
            "segment.bytes",
        ),
        ([("no.such.key", SET, "1")], ErrorCode.INVALID_CONFIG, "no.such.key"),
        ([("retention.ms", APPEND, "1")], ErrorCode.INVALID_CONFIG, "retention.ms"),
        (
            [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)],
            ErrorCode.INVALID_REQUEST,
            "retention.ms",
        ),
    ],
)
def test_a_refused_resource_writes_nothing(ops: list[Any], code: int, named: str) -> None:
    ctl = Controller()
    ctl.topic("t", {"retention.ms": "1000"})
    got, message, records = ctl.incremental("t", ops)
    assert (got, records) == (code, [])
    assert message is not None and named in message
    assert ctl.overrides("t") == {"retention.ms": "1000"}


def test_unknown_topic_null_values_and_validate_only() -> None:
    ctl = Controller()
    ctl.topic("t")
    assert ctl.incremental("missing", [("retention.ms", SET, "1")])[:2] == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "Topic missing does not exist.",
    )
    assert ctl.replace("t", {"retention.ms": None})[:2] == (
        ErrorCode.INVALID_REQUEST,
        "Null value not supported for topic configs",
    )
    validated = ctl.incremental("t", [("retention.ms", SET, "5")], validate_only=True)
    assert validated == (ErrorCode.NONE, None, [])
    assert ctl.overrides("t") == {}


def test_append_starts_from_the_brokers_log_default() -> None:
    ctl = Controller(LogConfig.from_properties({"cleanup.policy": "compact"}))
    ctl.topic("t")
    assert ctl.incremental("t", [("cleanup.policy", APPEND, "delete")])[0] == ErrorCode.NONE
    assert ctl.overrides("t") == {"cleanup.policy": "compact,delete"}
