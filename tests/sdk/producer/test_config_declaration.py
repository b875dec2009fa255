"""The producer's options are declared once, in ``ProducerConfig``: ``Producer.__init__`` (and the
blocking facade, whose signature is the async one's) offers exactly those keyword arguments, with
the dataclass's defaults and the same types, and documents each."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from sdk.producer import Producer
from sdk.producer.config import ProducerConfig
from sdk.sync import Producer as SyncProducer

pytestmark = pytest.mark.unit

_AIOKAFKA_CATCH_ALL = "aiokafka_options"


def _fields() -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(ProducerConfig) if f.init}


def _parameters() -> dict[str, inspect.Parameter]:
    parameters = dict(inspect.signature(Producer.__init__).parameters)
    del parameters["self"]
    return parameters


def _field_default(field: dataclasses.Field[Any]) -> Any:
    assert field.default_factory is dataclasses.MISSING, f"{field.name}: a factory default"
    return field.default


def test_the_constructor_takes_exactly_the_config_options():
    parameters = _parameters()
    assert parameters.pop(_AIOKAFKA_CATCH_ALL).kind is inspect.Parameter.VAR_KEYWORD
    assert sorted(parameters) == sorted(_fields())
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values())


def test_the_constructor_defaults_are_the_config_defaults():
    parameters = _parameters()
    for name, field in _fields().items():
        default = _field_default(field)
        assert parameters[name].default == default and type(parameters[name].default) is type(default), name


def _normalized(annotation: Any) -> str:
    return str(annotation).replace(" ", "")


def test_the_constructor_types_are_the_config_types():
    """Identical annotations, except where the config takes ``Any`` (it validates the value)."""
    parameters = _parameters()
    for name, field in _fields().items():
        if _normalized(field.type) == "Any":
            continue
        assert _normalized(parameters[name].annotation) == _normalized(field.type), name


def test_every_option_is_documented_on_the_constructor():
    doc = Producer.__init__.__doc__ or ""
    missing = [name for name in _fields() if f":param {name}:" not in doc]
    assert not missing


def test_a_config_built_from_no_arguments_has_the_declared_defaults():
    config = ProducerConfig.from_kwargs()
    for name, field in _fields().items():
        value = getattr(config, name)
        if name == "interceptors":
            value = tuple(value)
        assert value == _field_default(field), name


def test_the_blocking_producer_offers_the_same_options():
    sync = inspect.signature(SyncProducer.__init__).parameters
    assert sync == inspect.signature(Producer.__init__).parameters


def test_an_unknown_option_is_refused_naming_it():
    from sdk.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        Producer(linger_msec=5)
    assert caught.value.option == "linger_msec"
