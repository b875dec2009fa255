"""Asyncio Kafka client SDK built on a sans-IO protocol core (``sdk.protocol``, ``sdk.records``)."""
