"""The in-memory view of cluster metadata that request handlers read on every request."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

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
    def __init__(self, cluster_id: str, topics: list[TopicMetadata] | None = None) -> None:
        self.cluster_id = cluster_id
        self._by_name: dict[str, TopicMetadata] = {}
        self._by_id: dict[uuid.UUID, TopicMetadata] = {}
        for topic in topics or []:
            self.put(topic)

    def put(self, topic: TopicMetadata) -> None:
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def remove(self, name: str) -> None:
        topic = self._by_name.pop(name)
        del self._by_id[topic.topic_id]

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
