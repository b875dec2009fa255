"""Test helpers for applications built on the SDK: ``mock_coordinator`` and ``mock_time`` (a
scripted group coordinator and a manual clock, to test consumer group behaviour without a broker)
and ``librdkafka_mock`` (librdkafka's mock cluster; needs confluent-kafka)."""
