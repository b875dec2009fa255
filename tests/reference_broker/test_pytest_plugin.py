"""The pytest plugin as a user's project meets it: installed, it gives any test suite the
``broker`` and ``broker_factory`` fixtures, with no conftest of theirs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import reference_broker.pytest_plugin as plugin

USER_TESTS = '''
import socket

from confluent_kafka.admin import AdminClient, NewTopic


def test_the_shared_broker_serves_a_client(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("orders", num_partitions=2)])["orders"].result(20)
    assert len(admin.list_topics(timeout=20).topics["orders"].partitions) == 2


def test_a_broker_of_its_own(broker_factory, broker):
    own = broker_factory({"num.partitions": 3})
    assert own.running and own.port != broker.port
    socket.create_connection((own.host, own.port), timeout=5).close()
'''


def test_a_projects_own_suite_gets_the_fixtures_from_the_entry_point(tmp_path: Path) -> None:
    (tmp_path / "test_with_embedded_kafka.py").write_text(textwrap.dedent(USER_TESTS), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_the_plugin_is_registered_once(pytestconfig: pytest.Config) -> None:
    """Loaded by its entry point, or by tests/conftest.py when that did not load it; never both."""
    names = [name for name, p in pytestconfig.pluginmanager.list_name_plugin() if p is plugin]
    assert len(names) == 1, names
