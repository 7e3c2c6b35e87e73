"""Fjord's asyncio Kafka client: used by the control plane, pipelines and tests."""

from broker.client.admin import AdminClient as AdminClient
from broker.client.errors import KafkaAdminError as KafkaAdminError
from broker.client.session import Security as Security
