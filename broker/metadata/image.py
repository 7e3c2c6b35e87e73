"""The in-memory view of cluster metadata that request handlers read on every request."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

from broker.metadata.cluster import BrokerRegistration, PartitionRegistration

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # overrides, as the user wrote them

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


def topic_name_problem(name: str) -> str | None:
    """Why `name` is not a legal topic name (Kafka's Topic.validate), or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters"
    if not _LEGAL_TOPIC.match(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


class MetadataImage:
    """Topics, and in a cluster the brokers, the controller and every partition's replicas.

    A single broker keeps no registrations: each of its partitions is its own
    (PartitionRegistration.single), and it is the only broker and the controller."""

    def __init__(self, cluster_id: str, topics: list[TopicMetadata] | None = None) -> None:
        self.cluster_id = cluster_id
        self._by_name: dict[str, TopicMetadata] = {}
        self._by_id: dict[uuid.UUID, TopicMetadata] = {}
        self._registrations: dict[str, dict[int, PartitionRegistration]] = {}
        self.brokers: dict[int, BrokerRegistration] = {}
        self.controller_id = -1
        self._single: PartitionRegistration | None = None
        for topic in topics or []:
            self.put(topic)

    def make_single_node(self, node_id: int, registration: BrokerRegistration) -> None:
        self._single = PartitionRegistration.single(node_id)
        self.brokers = {node_id: registration}
        self.controller_id = node_id

    @property
    def single_node(self) -> bool:
        return self._single is not None

    @property
    def partition_single(self) -> PartitionRegistration | None:
        """Every partition's registration on a single broker (None in a cluster)."""
        return self._single

    def usable_brokers(self) -> set[int]:
        """Brokers that may lead and be elected: unfenced, not shutting down."""
        return {n for n, b in self.brokers.items() if b.usable}

    def put(
        self, topic: TopicMetadata, registrations: dict[int, PartitionRegistration] | None = None
    ) -> None:
        old = self._by_name.get(topic.name)
        if old is not None and old.topic_id != topic.topic_id:
            self.remove(topic.name)  # deleted and created again while we looked away
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic
        if registrations is not None:
            self._registrations[topic.name] = registrations

    def remove(self, name: str) -> None:
        topic = self._by_name.pop(name)
        del self._by_id[topic.topic_id]
        self._registrations.pop(name, None)

    def partition(self, name: str, partition: int) -> PartitionRegistration | None:
        """The partition's replicas, ISR and leader; None if the topic has no such partition."""
        topic = self._by_name.get(name)
        if topic is None or not 0 <= partition < topic.partitions:
            return None
        if self._single is not None:
            return self._single
        return self._registrations.get(name, {}).get(partition)

    def registrations(self, name: str) -> dict[int, PartitionRegistration]:
        topic = self._by_name.get(name)
        if topic is None:
            return {}
        if self._single is not None:
            return dict.fromkeys(range(topic.partitions), self._single)
        return self._registrations.get(name, {})

    def set_registration(self, name: str, partition: int, reg: PartitionRegistration) -> None:
        self._registrations.setdefault(name, {})[partition] = reg

    def topic(self, name: str) -> TopicMetadata | None:
        return self._by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._by_id.get(topic_id)

    def topics(self) -> list[TopicMetadata]:
        return list(self._by_name.values())

    def colliding_topic(self, name: str) -> str | None:
        """Kafka forbids topics whose names differ only by '.' versus '_' (metric names collide)."""
        key = name.replace(".", "_")
        for other in self._by_name:
            if other != name and other.replace(".", "_") == key:
                return other
        return None
