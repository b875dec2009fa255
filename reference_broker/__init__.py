"""A single-node Kafka-compatible broker built on the SDK's sans-IO core."""
