"""Fjord's asyncio Kafka client: used by the control plane, pipelines and tests."""
