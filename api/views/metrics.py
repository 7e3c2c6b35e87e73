"""The broker's metrics: the latest sample and the history of its scalar values."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from api import sampling
from api.metrics import SCALAR_FIELDS
from api.models import MetricSnapshot
from api.serializers.metrics import (
    DEFAULT_WINDOW_SECONDS,
    HistoryQuerySerializer,
    MetricHistorySerializer,
    MetricSnapshotSerializer,
)


def _minus(moment: datetime, seconds: float) -> datetime:
    try:
        return moment - timedelta(seconds=seconds)
    except OverflowError:  # a moment in year 1
        return datetime.min.replace(tzinfo=moment.tzinfo)


class MetricsViewSet(viewsets.ViewSet):
    """Samples of the broker's Prometheus endpoint, taken every FJORD_METRICS_INTERVAL seconds
    and kept for FJORD_METRICS_RETENTION seconds (viewer role)."""

    @extend_schema(
        responses={
            200: MetricSnapshotSerializer,
            404: OpenApiResponse(description="No sample has been taken yet."),
        }
    )
    @action(detail=False)
    def current(self, request: Request) -> Response:
        """The latest sample: offsets per partition, producer ids, ongoing transactions with
        their age, fetch-session cache, throughput and request rates, and by endpoint each
        broker's event loop lag and garbage collection pauses."""
        snapshot = sampling.latest()
        if snapshot is None:
            raise NotFound("No metrics sample has been taken yet.")
        data = {**sampling.public(snapshot.data), "taken_at": snapshot.taken_at}
        return Response(MetricSnapshotSerializer(data).data)

    @extend_schema(
        parameters=[HistoryQuerySerializer],
        responses={
            200: MetricHistorySerializer,
            400: OpenApiResponse(description="Invalid query: errors by parameter."),
        },
    )
    @action(detail=False)
    def history(self, request: Request) -> Response:
        """Series of scalar values between `since` and `until`, evenly downsampled to at most
        `points` points."""
        query = HistoryQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        until = query.validated_data.get("until") or timezone.now()
        since = query.validated_data.get("since") or _minus(until, DEFAULT_WINDOW_SECONDS)
        fields = query.validated_data.get("fields") or list(SCALAR_FIELDS)
        points = query.validated_data["points"]

        rows = list(
            MetricSnapshot.objects.filter(taken_at__gte=since, taken_at__lte=until)
            .order_by("taken_at")
            .values_list("taken_at", *(f"data__{field}" for field in fields))
        )
        step = max(1, math.ceil(len(rows) / points))
        shown = rows[::step]
        # The newest sample always ends the series, so a chart reaches "now".
        if rows and shown[-1] is not rows[-1]:
            shown[-1] = rows[-1]
        body = {
            "since": since,
            "until": until,
            "step": step,
            "taken_at": [row[0] for row in shown],
            "series": {
                field: [_number(row[i]) for row in shown] for i, field in enumerate(fields, 1)
            },
        }
        return Response(MetricHistorySerializer(body).data)


def _number(value: object) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
