"""Shared fixtures: the reference broker as a real subprocess.

``broker`` is one process for the whole session (use unique topic names); ``broker_factory``
makes fresh brokers with custom config and stops them after the test.
"""

from reference_broker.testing import broker, broker_factory

__all__ = ["broker", "broker_factory"]
