"""Every Spark Kafka option is honoured or refused, never ignored: parsing and conversion checked
without Spark or a broker (the readers and writers are built, not run)."""

from __future__ import annotations

import itertools
import pickle
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

from sdk.client.cluster import TopicPartition
from sdk.consumer.consumer import Consumer
from sdk.producer.producer import Producer
from spark_integration.kafka_ranges import OffsetRange, split_ranges, with_retries
from spark_integration.options import OptionError, ReadOptions, TimestampSpec, client_settings, duration_ms
from spark_integration.reader import KafkaStreamReader
from spark_integration.requirements import check_pyspark
from spark_integration.source import KafkaDataSource
from spark_integration.writer import SinkOptions

pytestmark = pytest.mark.unit

SERVERS = {"kafka.bootstrap.servers": "127.0.0.1:9"}
VALUE = StructType([StructField("value", BinaryType())])


def _read(streaming: bool = False, **options: str) -> ReadOptions:
    return ReadOptions.parse({**SERVERS, "subscribe": "t", **options}, streaming=streaming)


def _sink(schema: StructType = VALUE, **options: str) -> SinkOptions:
    return SinkOptions.parse({**SERVERS, "topic": "out", **options}, schema)


@pytest.mark.parametrize(("given", "nearest"), [
    ("startingOffset", "startingOffsets"),
    ("maxOffsetPerTrigger", "maxOffsetsPerTrigger"),
    ("failOnDatLoss", "failOnDataLoss"),
    ("includeHeader", "includeHeaders"),
])
def test_a_misspelled_source_option_names_the_nearest_valid_one(given: str, nearest: str) -> None:
    with pytest.raises(OptionError, match=f"did you mean '{nearest}'"):
        _read(**{given.lower(): "1"})


def test_a_misspelled_sink_or_kafka_option_names_the_nearest_valid_one() -> None:
    with pytest.raises(OptionError, match=r"did you mean 'transactional\.id\.prefix'"):
        _sink(**{"transactional.id.prefx": "p"})
    with pytest.raises(OptionError, match=r"did you mean 'kafka\.max\.poll\.records'"):
        _read(**{"kafka.max.poll.record": "10"})


def test_kafka_settings_whose_default_is_none_get_their_type() -> None:
    assert client_settings({**SERVERS, "kafka.max.poll.records": "10"}, Consumer)["max_poll_records"] == 10
    producer = client_settings({**SERVERS, "kafka.enable.idempotence": "false", "kafka.acks": "1"}, Producer)
    assert producer["enable_idempotence"] is False and producer["acks"] == 1
    assert client_settings({**SERVERS, "kafka.acks": "all"}, Producer)["acks"] == "all"
    with pytest.raises(OptionError, match="true or false"):
        client_settings({**SERVERS, "kafka.enable.idempotence": "no"}, Producer)
    with pytest.raises(OptionError, match="integer"):
        client_settings({**SERVERS, "kafka.max.poll.records": "ten"}, Consumer)


def test_acks_1_is_for_the_at_least_once_sink_only() -> None:
    assert _sink(**{"kafka.acks": "1", "delivery.guarantee": "at-least-once"}).producer_settings["acks"] == 1
    with pytest.raises(OptionError, match="acks=all"):
        _sink(**{"kafka.acks": "1"})


@pytest.mark.parametrize(("column", "kind", "message"), [
    ("value", IntegerType(), "value attribute type must be a string or binary"),
    ("key", IntegerType(), "key attribute type must be a string or binary"),
    ("topic", BinaryType(), "Topic type must be a string"),
    ("partition", StringType(), "partition attribute type must be an int"),
    ("headers", ArrayType(StringType()), "headers attribute type must be"),
])
def test_sink_columns_of_the_wrong_type_are_refused_as_spark_does(
        column: str, kind: Any, message: str) -> None:
    fields = [StructField(column, kind)] + ([] if column == "value" else [StructField("value", StringType())])
    with pytest.raises(OptionError, match=message):
        _sink(StructType(fields))


def test_overwrite_is_refused_with_sparks_message() -> None:
    with pytest.raises(OptionError, match="Save mode Overwrite not allowed for Kafka"):
        KafkaDataSource({**SERVERS, "topic": "out"}).writer(VALUE, overwrite=True)


def test_the_headers_column_is_there_only_with_include_headers() -> None:
    assert "headers" not in KafkaDataSource({**SERVERS, "subscribe": "t"}).schema()
    assert "headers" in KafkaDataSource({**SERVERS, "subscribe": "t", "includeHeaders": "true"}).schema()
    assert _read(includeheaders="true").include_headers and not _read().include_headers


def test_timestamp_options_are_parsed_with_sparks_precedence() -> None:
    starting = _read(startingtimestamp="1700000000000", startingoffsetsbytimestamp='{"t":{"0":5}}').starting
    assert starting == TimestampSpec(1700000000000, missing="error")
    by_partition = _read(startingoffsetsbytimestamp='{"t":{"0":5,"1":7}}',
                         startingoffsetsbytimestampstrategy="latest").starting
    explicit = {TopicPartition("t", 0): 5, TopicPartition("t", 1): 7}
    assert by_partition == TimestampSpec(None, explicit, "latest")
    assert _read(endingtimestamp="9").ending == TimestampSpec(9, missing="latest")
    with pytest.raises(OptionError, match="endingTimestamp' is for batch queries only"):
        _read(streaming=True, endingtimestamp="9")
    with pytest.raises(OptionError, match="startingOffsetsByTimestampStrategy"):
        _read(startingoffsetsbytimestampstrategy="earliest")
    with pytest.raises(OptionError, match="milliseconds"):
        _read(startingtimestamp="yesterday")


def test_trigger_options() -> None:
    assert duration_ms("15m", "maxTriggerDelay") == 900_000 and duration_ms("250ms", "x") == 250
    options = _read(streaming=True, minoffsetspertrigger="100", maxtriggerdelay="1h")
    assert (options.min_offsets_per_trigger, options.max_trigger_delay_ms) == (100, 3_600_000)
    with pytest.raises(OptionError, match="duration"):
        _read(streaming=True, maxtriggerdelay="soon")
    with pytest.raises(OptionError, match="streaming queries only"):
        _read(minoffsetspertrigger="100")
    reader = KafkaStreamReader({**SERVERS, "subscribe": "t", "minOffsetsPerTrigger": "100"})
    tp = TopicPartition("t", 0)
    assert reader._too_few({tp: 0}, {tp: 99})
    assert not reader._too_few({tp: 0}, {tp: 100})
    overdue = KafkaStreamReader({**SERVERS, "subscribe": "t", "minOffsetsPerTrigger": "100",
                                 "maxTriggerDelay": "0ms"})
    assert not overdue._too_few({tp: 0}, {tp: 1})


def test_min_partitions_cuts_ranges_in_proportion_to_their_size() -> None:
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    ranges = split_ranges({a: 0, b: 0}, {a: 100, b: 10}, None, 5)
    assert len(ranges) >= 5
    assert sorted((r.partition, r.start, r.end) for r in ranges)[0] == (0, 0, 20)  # 5 pieces of 100
    for tp, end in ((a, 100), (b, 10)):  # the pieces still cover each range exactly once
        pieces = sorted((r.start, r.end) for r in ranges if r.partition == tp.partition)
        assert pieces[0][0] == 0 and pieces[-1][1] == end
        assert all(left[1] == right[0] for left, right in itertools.pairwise(pieces))
    assert split_ranges({a: 0}, {a: 0}, None, 5) == []
    assert split_ranges({a: 0}, {a: 3}, None, 10) == [OffsetRange("t", 0, i, i + 1) for i in range(3)]


def test_offset_lookups_are_retried_as_fetch_offset_options_say() -> None:
    options = _read(**{"fetchoffset.numretries": "2", "fetchoffset.retryintervalms": "0"})
    calls: list[int] = []

    def failing() -> int:
        calls.append(1)
        raise ConnectionError("broker away")

    with pytest.raises(ConnectionError):
        with_retries(options, "test lookup", failing)
    assert len(calls) == 3
    with pytest.raises(OptionError, match=r"fetchOffset\.numRetries"):
        _read(**{"fetchoffset.numretries": "-1"})


def test_group_id_options_name_the_consumers() -> None:
    assert _read(**{"kafka.group.id": "g"}).consumer_settings["group_id"] == "g"
    assert _read(groupidprefix="etl").consumer_settings["group_id"].startswith("etl-")
    assert "group_id" not in _read().consumer_settings


def test_sasl_options_map_to_the_sdk_settings() -> None:
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p w";'
    settings = client_settings({**SERVERS, "kafka.security.protocol": "SASL_PLAINTEXT",
                                "kafka.sasl.mechanism": "SCRAM-SHA-256", "kafka.sasl.jaas.config": jaas},
                               Consumer)
    assert (settings["security_protocol"], settings["sasl_mechanism"]) == ("SASL_PLAINTEXT", "SCRAM-SHA-256")
    assert (settings["sasl_plain_username"], settings["sasl_plain_password"]) == ("u", "p w")
    with pytest.raises(OptionError, match="not supported"):
        oauth = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
        client_settings({**SERVERS, "kafka.sasl.jaas.config": oauth}, Consumer)


def test_ssl_options_make_a_context_that_travels_to_the_executors(tmp_path: Path) -> None:
    from tests.kafka_security import make_pki

    pki = make_pki(tmp_path)
    keystore = tmp_path / "client-keystore.pem"
    keystore.write_bytes(pki.client_key.read_bytes() + pki.client_cert.read_bytes())
    options = {**SERVERS, "kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": str(pki.ca),
               "kafka.ssl.truststore.type": "PEM", "kafka.ssl.keystore.location": str(keystore),
               "kafka.ssl.key.password": pki.client_key_password,
               "kafka.ssl.endpoint.identification.algorithm": ""}
    context = client_settings(options, Consumer)["ssl_context"]
    copy = pickle.loads(pickle.dumps(context))
    for made in (context, copy):
        assert isinstance(made, ssl.SSLContext)
        assert [c["subject"] for c in made.get_ca_certs()] == [c["subject"] for c in context.get_ca_certs()]
        assert len(made.get_ca_certs()) == 1 and made.check_hostname is False
    with pytest.raises(OptionError, match="PEM files only"):
        client_settings({**options, "kafka.ssl.truststore.location": "/x/truststore.jks",
                         "kafka.ssl.truststore.type": "JKS"}, Consumer)
    with pytest.raises(OptionError, match="SSL or SASL_SSL"):
        client_settings({**options, "kafka.security.protocol": "PLAINTEXT"}, Consumer)
    with pytest.raises(OptionError, match=r"did you mean 'kafka\.ssl\.truststore\.location'"):
        client_settings({**options, "kafka.ssl.trustore.location": "x"}, Consumer)


def test_an_old_or_missing_pyspark_gets_an_error_naming_the_extra() -> None:
    with pytest.raises(ImportError, match=r"PySpark 4\.0 or newer, not 3\.5\.1.*topicwright\[spark\]"):
        check_pyspark("3.5.1")
    with pytest.raises(ImportError, match=r"not installed.*topicwright\[spark\]"):
        check_pyspark(None)
    with pytest.raises(ImportError, match=r"4\.2"):
        check_pyspark("4.1.0", (4, 2), "streaming")
    check_pyspark("4.3.0")


def test_the_missing_pyspark_error_names_the_interpreter_and_how_workers_pick_theirs() -> None:
    # Spark's Python workers run PYSPARK_PYTHON, not the driver's (virtual-environment) interpreter.
    with pytest.raises(ImportError) as missing:
        check_pyspark(None)
    assert sys.executable in str(missing.value) and "PYSPARK_PYTHON" in str(missing.value)


def test_the_sinks_marker_reads_use_the_same_security_settings() -> None:
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    options = _sink(**{"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
                       "kafka.sasl.jaas.config": jaas})
    for settings in (options.producer_settings, options.consumer_settings):
        assert (settings["security_protocol"], settings["sasl_plain_username"]) == ("SASL_PLAINTEXT", "u")
