"""AdminClient: the asyncio Kafka admin client the control plane drives the broker with.

Its operations are grouped by resource in a chain of modules, each building on the last:
cluster (connections, routing, retries) -> admin_topics -> admin_groups ->
admin_transactions -> admin_security -> admin_quotas. Every operation returns dataclasses from
broker.client.models and raises KafkaAdminError for a Kafka error.
"""

from __future__ import annotations

from broker.client.admin_quotas import QuotaOperations


class AdminClient(QuotaOperations):
    """`async with AdminClient("host:9092", Security(...)) as admin: ...`"""
