"""Fjord's asyncio Kafka client: used by the control plane, pipelines and tests."""

from broker.client.admin import AdminClient as AdminClient
from broker.client.consumer import Consumer as Consumer
from broker.client.errors import KafkaAdminError as KafkaAdminError
from broker.client.fetcher import PartitionReader as PartitionReader
from broker.client.models import ConsumerRecord as ConsumerRecord
from broker.client.models import RecordMetadata as RecordMetadata
from broker.client.producer import Producer as Producer
from broker.client.session import Security as Security
