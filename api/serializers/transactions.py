"""Transactions and the producers of a partition, as kafka-transactions lists, describes and
aborts them."""

from __future__ import annotations

from rest_framework import serializers

from api.serializers.acls import query_text
from api.serializers.groups import INT32_MAX, INT64_MAX, AssignedPartitionSerializer

# TransactionState names of Kafka's transaction coordinator.
TRANSACTION_STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)
TOPIC_NAME_HELP = "A topic name: up to 249 of [a-zA-Z0-9._-]"
TOPIC_NAME = r"^[a-zA-Z0-9._-]{1,249}$"


class TransactionSerializer(serializers.Serializer):
    """A transactional id with its state and, when a transaction is open, its age."""

    transactional_id = serializers.CharField()
    producer_id = serializers.IntegerField()
    producer_epoch = serializers.IntegerField(allow_null=True)
    state = serializers.CharField(help_text="Empty, Ongoing, PrepareCommit, CompleteCommit, ...")
    transaction_timeout_ms = serializers.IntegerField(allow_null=True)
    transaction_start_time_ms = serializers.IntegerField(
        allow_null=True, help_text="Null when no transaction is open."
    )
    age_ms = serializers.IntegerField(
        allow_null=True, help_text="How long the open transaction has run."
    )
    hanging = serializers.BooleanField(
        help_text="Ongoing for longer than its transaction timeout: the coordinator should "
        "have aborted it."
    )


class TransactionDetailSerializer(TransactionSerializer):
    coordinator_id = serializers.IntegerField()
    partitions = AssignedPartitionSerializer(many=True)


class TransactionQuerySerializer(serializers.Serializer):
    state = serializers.ChoiceField(TRANSACTION_STATES, required=False)
    search = query_text(help_text="Part of the transactional id")
    hanging = serializers.BooleanField(required=False, allow_null=True, default=None)


class PartitionQuerySerializer(serializers.Serializer):
    topic = serializers.RegexField(TOPIC_NAME, help_text=TOPIC_NAME_HELP)
    partition = serializers.IntegerField(min_value=0, max_value=INT32_MAX)


class ProducerStateSerializer(serializers.Serializer):
    producer_id = serializers.IntegerField()
    producer_epoch = serializers.IntegerField()
    last_sequence = serializers.IntegerField()
    last_timestamp_ms = serializers.IntegerField()
    coordinator_epoch = serializers.IntegerField()
    current_transaction_start_offset = serializers.IntegerField(
        help_text="-1 outside a transaction; else the first offset of its open transaction"
    )


class AbortSerializer(PartitionQuerySerializer):
    """Abort a producer's open (hanging) transaction on one partition by writing an ABORT marker,
    as `kafka-transactions.sh abort` does."""

    producer_id = serializers.IntegerField(min_value=0, max_value=INT64_MAX)
