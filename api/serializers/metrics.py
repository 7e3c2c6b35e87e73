"""The broker's metrics as the dashboards see them: the latest snapshot (api.metrics) and
series of its scalar values over time."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from api.metrics import SCALAR_FIELDS

MAX_POINTS = 2000
DEFAULT_POINTS = 600
DEFAULT_WINDOW_SECONDS = 600


class PartitionOffsetsSerializer(serializers.Serializer):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    log_start_offset = serializers.IntegerField()
    high_watermark = serializers.IntegerField()
    last_stable_offset = serializers.IntegerField(
        help_text="Below the high watermark while a transaction is open on the partition."
    )


class TopicPartitionSerializer(serializers.Serializer):
    topic = serializers.CharField()
    partition = serializers.IntegerField()


class OngoingTransactionSerializer(serializers.Serializer):
    transactional_id = serializers.CharField()
    producer_id = serializers.IntegerField()
    producer_epoch = serializers.IntegerField()
    state = serializers.CharField()
    age_seconds = serializers.FloatField()
    timeout_ms = serializers.IntegerField()
    hanging = serializers.BooleanField(
        help_text="Open longer than its transaction timeout: the coordinator should have "
        "aborted it."
    )
    partitions = TopicPartitionSerializer(many=True)


class ApiRequestsSerializer(serializers.Serializer):
    requests_total = serializers.IntegerField()
    requests_per_second = serializers.FloatField(allow_null=True)
    latency_ms = serializers.FloatField(
        allow_null=True, help_text="Mean latency of the requests since the previous sample."
    )
    bytes_in_per_second = serializers.FloatField(allow_null=True)
    bytes_out_per_second = serializers.FloatField(allow_null=True)


class QuotaThrottleSerializer(serializers.Serializer):
    """One quota type of one entity, by the broker's metric tags: user and client_id are ""
    where the quota is shared (a user's quota covers all of its client ids)."""

    quota_type = serializers.ChoiceField(["produce", "fetch", "request", "controller_mutation"])
    user = serializers.CharField(allow_blank=True)
    client_id = serializers.CharField(allow_blank=True)
    throttle_time_ms_per_second = serializers.FloatField(
        allow_null=True, help_text="Throttle time given to its responses, per second."
    )
    throttled_per_second = serializers.FloatField(
        allow_null=True, help_text="Throttled responses per second."
    )
    mean_throttle_ms = serializers.FloatField(
        allow_null=True,
        help_text="Mean throttle of its responses throttled since the previous sample.",
    )
    throttle_time_ms_total = serializers.IntegerField()
    throttled_total = serializers.IntegerField()
    rate = serializers.FloatField(
        help_text="Measured usage: bytes/s (produce, fetch), percent (request), mutations/s."
    )
    limit = serializers.FloatField(allow_null=True, help_text="Its quota; null when unlimited.")
    usage = serializers.FloatField(allow_null=True, help_text="rate / limit")


class ConnectionsThrottledSerializer(serializers.Serializer):
    ip = serializers.CharField()
    throttled_total = serializers.IntegerField()
    throttled_per_second = serializers.FloatField(allow_null=True)


def _number(help_text: str) -> serializers.FloatField:
    return serializers.FloatField(allow_null=True, required=False, help_text=help_text)


class MetricsEndpointSerializer(serializers.Serializer):
    """One broker's metrics endpoint, and what held that broker's event loop: its own figures,
    not added up; null where its endpoint lacks them (a broker older than them) or did not
    answer."""

    url = serializers.CharField()
    status = serializers.ChoiceField(["up", "unreachable"])
    down_since = serializers.DateTimeField(
        required=False,
        help_text="Unreachable ones: when the first sample of this outage was taken.",
    )
    event_loop_lag_max_ms = _number(
        "The longest event loop lag of the last ten seconds, in ms: how late a timer due every "
        "0.1 s ran, the time the loop was held."
    )
    event_loop_lag_mean_ms = _number("The mean event loop lag since the broker started, in ms.")
    gc_collections_total = _number("Garbage collections of any generation since it started.")
    gc_gen2_collections_total = _number(
        "Garbage collections of the oldest generation (2), which walk every live object not frozen."
    )
    gc_gen2_pause_mean_ms = _number(
        "The mean pause of a generation-2 collection, in ms; null before the first."
    )
    gc_gen2_pause_time_ms_total = _number("Time held by generation-2 collections, in ms.")
    gc_frozen_objects = _number("Objects frozen out of the collector's reach at start-up.")


class MetricSnapshotSerializer(serializers.Serializer):
    """One sample of every broker (FJORD_METRICS_URL), added up; rates are null on the first
    sample after a gap."""

    taken_at = serializers.DateTimeField()
    broker = serializers.ChoiceField(
        ["up", "partial", "unreachable"],
        help_text="Whether the metrics endpoints answered: all, some, or none.",
    )
    error = serializers.CharField(
        allow_null=True, required=False, help_text="What the endpoints that failed answered."
    )
    endpoints = MetricsEndpointSerializer(
        many=True,
        required=False,
        help_text="Each broker's endpoint, with what held its event loop (not added up).",
    )
    partitions = PartitionOffsetsSerializer(many=True, required=False)
    transactions = OngoingTransactionSerializer(many=True, required=False)
    transactions_error = serializers.CharField(allow_null=True, required=False)
    producer_ids_live = _number("Producer ids with state, summed over the partitions.")
    transactional_ids_active = _number("Transactional ids the coordinator holds state for.")
    transactions_ongoing = _number("Transactions begun and not yet completed.")
    transactions_oldest_age_seconds = _number("Age of the oldest open transaction.")
    fetch_sessions_incremental = _number("Incremental fetch sessions cached (KIP-227).")
    fetch_session_partitions_cached = _number("Partitions held by the cached fetch sessions.")
    fetch_session_evictions_total = _number("Fetch sessions evicted since the broker started.")
    fetch_session_evictions_per_second = _number("Evictions per second.")
    bytes_in_per_second = _number("Bytes of Produce requests per second.")
    bytes_out_per_second = _number("Bytes of Fetch responses per second.")
    requests_per_second = _number("Requests per second, all APIs.")
    partitions_behind = _number("Partitions whose last stable offset is below the high watermark.")
    requests = serializers.DictField(child=ApiRequestsSerializer(), required=False)
    quotas = QuotaThrottleSerializer(
        many=True, required=False, help_text="The most throttled quota entities first."
    )
    quota_throttle_time_ms_per_second = _number("Throttle time given, all entities, per second.")
    connections_throttled = ConnectionsThrottledSerializer(many=True, required=False)
    connections_throttled_per_second = _number(
        "Connections closed per second for their ip's connection_creation_rate."
    )
    under_replicated_partitions = _number(
        "Partitions whose ISR lacks one of their replicas (each counted by its leader)."
    )
    offline_partitions = _number("Partitions without a leader (counted by the controller).")
    active_controllers = _number("Brokers acting as controller: 1 in a healthy cluster.")
    isr_shrinks_per_second = _number("Replicas dropped from an ISR per second.")
    isr_expands_per_second = _number("Replicas added back to an ISR per second.")
    leader_elections_per_second = _number("Partition leaders elected per second.")
    replica_fetcher_lag_max = _number(
        "The largest lag of a follower behind its leader's high watermark, in records."
    )


class HistoryQuerySerializer(serializers.Serializer):
    since = serializers.DateTimeField(
        required=False, help_text=f"Start (ISO 8601); default {DEFAULT_WINDOW_SECONDS} s ago."
    )
    until = serializers.DateTimeField(required=False, help_text="End (ISO 8601); default now.")
    # The metaclass pops declared fields off the class, so this does not hide Serializer.fields.
    fields = serializers.CharField(
        required=False,
        help_text="Comma-separated scalar fields; default all of: " + ", ".join(SCALAR_FIELDS),
    )
    points = serializers.IntegerField(
        required=False,
        min_value=2,
        max_value=MAX_POINTS,
        default=DEFAULT_POINTS,
        help_text="At most this many points; longer ranges are downsampled evenly.",
    )

    def validate_fields(self, value: str) -> list[str]:
        names = [name.strip() for name in value.split(",") if name.strip()]
        unknown = [name for name in names if name not in SCALAR_FIELDS]
        if unknown:
            raise serializers.ValidationError(
                f"Unknown field(s): {', '.join(unknown)}. Choose from: {', '.join(SCALAR_FIELDS)}."
            )
        if not names:
            raise serializers.ValidationError("Name at least one field.")
        return list(dict.fromkeys(names))

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        since, until = attrs.get("since"), attrs.get("until")
        if since and until and since > until:
            raise serializers.ValidationError({"until": "Must not be before since."})
        return attrs


class MetricHistorySerializer(serializers.Serializer):
    """Columns: taken_at[i] is when series[field][i] was sampled."""

    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    step = serializers.IntegerField(help_text="One stored sample in every `step` is shown.")
    taken_at = serializers.ListField(child=serializers.DateTimeField())
    series = serializers.DictField(
        child=serializers.ListField(child=serializers.FloatField(allow_null=True))
    )
