"""The Producer's public surface: explicit keyword arguments, aiokafka's names and options."""

from __future__ import annotations

import dataclasses
import inspect
import warnings

import pytest

import sdk
from sdk import Producer
from sdk.errors import ConfigError, IllegalStateError
from sdk.producer.config import ProducerConfig


def test_every_setting_is_an_explicit_keyword_with_the_config_default():
    parameters = inspect.signature(Producer.__init__).parameters
    fields = {f.name: f.default for f in dataclasses.fields(ProducerConfig) if f.init}
    explicit = {name: p.default for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert explicit == fields  # one default per setting, the same in the signature and the config
    doc = Producer.__init__.__doc__ or ""
    for name in explicit:
        assert f":param {name}:" in doc, f"{name} has no line of documentation"


def test_aiokafka_producer_alias_and_max_batch_size():
    assert sdk.AIOKafkaProducer is Producer
    assert Producer(bootstrap_servers="h:1", max_batch_size=4096).config.batch_size == 4096


def test_aiokafka_options_without_meaning_are_accepted_with_a_warning():
    with pytest.warns(UserWarning, match="api_version"):
        Producer(bootstrap_servers="h:1", api_version="auto")
    with pytest.warns(UserWarning, match="connections_max_idle_ms"):
        Producer(bootstrap_servers="h:1", connections_max_idle_ms=540000)
    with pytest.warns(DeprecationWarning, match="loop"):
        Producer(bootstrap_servers="h:1", loop=None)
    with pytest.warns(UserWarning, match="sasl_kerberos_service_name"):
        Producer(bootstrap_servers="h:1", sasl_kerberos_service_name="kafka")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Producer(bootstrap_servers="h:1", linger_ms=0)  # our own options warn about nothing


def test_unknown_and_bad_options_still_fail_with_config_error():
    with pytest.raises(ConfigError) as info:
        Producer(bootstrap_servers="h:1", lingerms=5)
    assert info.value.option == "lingerms"
    with pytest.raises(ConfigError) as info:
        Producer(bootstrap_servers="h:1", acks=2)
    assert info.value.option == "acks"


async def test_transaction_is_an_async_context_manager_that_needs_a_started_producer():
    producer = Producer(bootstrap_servers="h:1", transactional_id="tx")
    context = producer.transaction()
    assert hasattr(context, "__aenter__") and hasattr(context, "__aexit__")
    with pytest.raises(IllegalStateError, match="not started"):
        async with context:
            pytest.fail("the transaction block must not run")


def test_aiokafka_exception_names_are_importable_from_sdk_errors():
    import aiokafka.errors

    import sdk.errors

    for name in sdk.errors.AIOKAFKA_ALIASES:
        ours = getattr(sdk.errors, name)
        theirs = getattr(aiokafka.errors, name)
        assert issubclass(ours, sdk.errors.KafkaError), name
        errno = getattr(theirs, "errno", None)
        if isinstance(errno, int) and errno > -1:
            assert ours.code == errno, name  # the same broker error code
    assert sdk.errors.ProducerClosed is sdk.errors.ProducerClosedError
    assert sdk.errors.ProducerFenced is sdk.errors.ProducerFencedError
    assert sdk.errors.NoBrokersAvailable is sdk.errors.NoBrokersAvailableError
    # Names aiokafka shares with us are our own classes.
    for name in (
        "KafkaTimeoutError",
        "KafkaConnectionError",
        "UnknownTopicOrPartitionError",
        "IllegalStateError",
    ):
        assert hasattr(aiokafka.errors, name) and issubclass(getattr(sdk.errors, name), sdk.errors.KafkaError)
