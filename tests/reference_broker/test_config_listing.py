"""The broker's command line documents every setting it accepts, and refuses an unknown one by
naming the nearest valid name, whether it comes from ``--override`` or a properties file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reference_broker.config import BROKER_KEYS, MECHANISM_KEYS
from reference_broker.dynamic_config import DYNAMIC_KEYS


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reference_broker", *args], capture_output=True, text=True, timeout=60
    )


def test_every_declared_setting_is_listed_with_its_documentation() -> None:
    result = run_cli("configs", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    mechanism_forms = {f"listener.name.<listener>.<mechanism>.{name}" for name in MECHANISM_KEYS}
    assert set(rows) == set(BROKER_KEYS) | mechanism_forms
    assert [name for name, row in rows.items() if not row["documentation"].strip()] == []
    assert rows["num.partitions"] | {"documentation": ""} == {
        "name": "num.partitions",
        "type": "int",
        "default": "1",
        "valid_values": "[1,...]",
        "update_mode": "read-only",
        "sensitive": False,
        "per_listener": None,
        "documentation": "",
    }
    dynamic = {name for name, row in rows.items() if row["update_mode"] != "read-only"}
    assert dynamic == DYNAMIC_KEYS & set(rows)
    assert rows["ssl.client.auth"]["valid_values"] == "required, requested, none"
    assert rows["ssl.keystore.location"]["per_listener"] == "listener.name.<listener>.ssl.keystore.location"

    text = run_cli("configs")
    assert text.returncode == 0, text.stderr
    listed = {line for line in text.stdout.splitlines() if line and not line.startswith(" ")}
    assert listed == set(rows)


def test_the_listing_filters_by_name() -> None:
    result = run_cli("configs", "log.retention")
    assert result.returncode == 0, result.stderr
    names = [line for line in result.stdout.splitlines() if line and not line.startswith(" ")]
    assert names == sorted(n for n in BROKER_KEYS if "log.retention" in n)
    nothing = run_cli("configs", "no.such.words")
    assert nothing.returncode == 1 and "no.such.words" in nothing.stderr


def test_help_points_to_the_settings_listing() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert "python -m reference_broker configs" in result.stdout and "--override" in result.stdout


@pytest.mark.parametrize(
    ("key", "nearest"),
    [
        ("num.partition", "num.partitions"),
        ("log.retention.hour", "log.retention.hours"),
        ("listener.name.ssl.ssl.keystore.locaton", "listener.name.ssl.ssl.keystore.location"),
        ("listener.name.sasl.plain.sasl.jass.config", "listener.name.sasl.plain.sasl.jaas.config"),
    ],
)
def test_an_unknown_setting_names_the_nearest_valid_one(tmp_path: Path, key: str, nearest: str) -> None:
    data = str(tmp_path / "data")
    on_the_command_line = run_cli("--data-dir", data, "--port", "0", "--override", f"{key}=1")
    properties = tmp_path / "broker.properties"
    properties.write_text(f"{key}=1\n")
    in_a_file = run_cli("--data-dir", data, "--port", "0", "--config", str(properties))
    for result in (on_the_command_line, in_a_file):
        assert result.returncode == 2
        assert f"unknown config key {key!r}; the nearest valid one is {nearest!r}" in result.stderr
        assert "listening" not in result.stdout


def test_override_wins_over_the_file_and_is_checked(tmp_path: Path) -> None:
    properties = tmp_path / "broker.properties"
    properties.write_text("num.partitions=3\n")
    bad = run_cli("--data-dir", str(tmp_path), "--config", str(properties), "--override", "num.partitions=0")
    assert bad.returncode == 2 and "num.partitions: 0 must be at least 1" in bad.stderr
    malformed = run_cli("--data-dir", str(tmp_path), "--override", "num.partitions")
    assert malformed.returncode == 2 and "is not KEY=VALUE" in malformed.stderr
