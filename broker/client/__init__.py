"""Fjord's asyncio Kafka client: used by the control plane, pipelines and tests."""

from broker.client.admin import AdminClient as AdminClient
from broker.client.consumer import Consumer as Consumer
from broker.client.consumer.rebalance import (
    ConsumerRebalanceListener as ConsumerRebalanceListener,
)
from broker.client.errors import KafkaAdminError as KafkaAdminError
from broker.client.fetcher import PartitionReader as PartitionReader
from broker.client.models import ConsumerGroupMetadata as ConsumerGroupMetadata
from broker.client.models import ConsumerRecord as ConsumerRecord
from broker.client.models import OffsetAndMetadata as OffsetAndMetadata
from broker.client.models import RecordMetadata as RecordMetadata
from broker.client.models import TopicPartition as TopicPartition
from broker.client.options import ConfigError as ConfigError
from broker.client.producer import Producer as Producer
from broker.client.producer.produce_result import FutureRecordMetadata as FutureRecordMetadata
from broker.client.session import Security as Security
