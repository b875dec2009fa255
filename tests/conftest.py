"""Shared fixtures: the reference broker as a real subprocess.

``broker`` is one process for the whole session (use unique topic names); ``broker_factory``
makes fresh brokers with custom config and stops them after the test. Both come from the
``reference_broker.pytest_plugin`` plugin, which the distribution's ``pytest11`` entry point loads;
where it was not loaded (an install without that entry point's metadata,
``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``, ``-p no:reference_broker``), it is registered here, once.
"""

from __future__ import annotations

import pytest

PLUGIN = "reference_broker.pytest_plugin"


def pytest_configure(config: pytest.Config) -> None:
    import reference_broker.pytest_plugin as plugin

    if not config.pluginmanager.is_registered(plugin):
        config.pluginmanager.register(plugin, PLUGIN)
