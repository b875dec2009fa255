"""Test helpers for applications built on the SDK (optional: they need confluent-kafka)."""
