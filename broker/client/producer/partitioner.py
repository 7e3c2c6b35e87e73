"""Where a record goes when the caller names no partition: Kafka's murmur2 of the key, and
for a record without a key (or with partitioner_ignore_keys) the sticky partitioner of KIP-480,
which fills one batch at a time instead of scattering small batches over every partition."""

from __future__ import annotations

import random
from collections.abc import Sequence

from broker.client.routing import partition_for_key


class Partitioner:
    def __init__(self, ignore_keys: bool = False, rng: random.Random | None = None) -> None:
        self.ignore_keys = ignore_keys
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, count: int, available: Sequence[int]) -> int:
        """`count` partitions, `available` those with a leader (any partition when none has)."""
        if key is not None and not self.ignore_keys:
            return partition_for_key(key, count)
        sticky = self._sticky.get(topic)
        if sticky is None or sticky >= count:
            sticky = self._sticky[topic] = self._pick(count, available, None)
        return sticky

    def on_new_batch(self, topic: str, previous: int, count: int, available: Sequence[int]) -> None:
        """The sticky partition's batch is complete: the next keyless records go to another
        partition, chosen at random among those with a leader."""
        if self._sticky.get(topic, previous) == previous:
            self._sticky[topic] = self._pick(count, available, previous)

    def _pick(self, count: int, available: Sequence[int], previous: int | None) -> int:
        choices = [p for p in (available or range(count)) if p != previous]
        if not choices:
            return previous if previous is not None else 0
        return self._rng.choice(choices)
