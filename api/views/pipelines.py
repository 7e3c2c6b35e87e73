from __future__ import annotations

from collections.abc import Callable

from drf_spectacular.utils import extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from api import audit
from api.kafka import BrokerUnavailable
from api.serializers.pipelines import PipelineRunSerializer, PipelineSerializer
from broker.client import KafkaAdminError
from pipelines import lifecycle
from pipelines.models import Pipeline, PipelineRun
from pipelines.runner import settle_transactions


class PipelineViewSet(viewsets.ModelViewSet):
    """Exactly-once Spark pipelines: define, change, start, stop, and their runs."""

    queryset = Pipeline.objects.select_related("created_by")
    serializer_class = PipelineSerializer

    def perform_create(self, serializer: PipelineSerializer) -> None:
        pipeline = lifecycle.define(serializer, created_by=self.request.user)
        audit.note(self.request, resource=f"pipeline/{pipeline.name}")

    def perform_update(self, serializer: PipelineSerializer) -> None:
        if lifecycle.active_run(serializer.instance) is not None:
            raise ValidationError({"status": "stop the pipeline before changing it"})
        lifecycle.define(serializer)
        audit.note(self.request, resource=f"pipeline/{serializer.instance.name}")

    def perform_destroy(self, instance: Pipeline) -> None:
        if lifecycle.active_run(instance) is not None:
            raise ValidationError({"status": "stop the pipeline before deleting it"})
        audit.note(self.request, resource=f"pipeline/{instance.name}")
        if instance.runs.exists():
            # Nothing of it may stay prepared: no run would ever settle it after this. Its
            # principal settles them, so it goes after.
            try:
                settle_transactions(instance)
            except (OSError, KafkaAdminError) as e:
                raise BrokerUnavailable(f"could not settle the pipeline's transactions: {e}") from e
        lifecycle.remove(instance)

    def _state_change(
        self, request: Request, change: Callable[[Pipeline], PipelineRun]
    ) -> Response:
        pipeline = self.get_object()
        audit.note(request, resource=f"pipeline/{pipeline.name}")
        try:
            run = change(pipeline)
        except lifecycle.PipelineStateError as e:
            return Response({"detail": str(e)}, status=status.HTTP_409_CONFLICT)
        return Response(PipelineRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={202: PipelineRunSerializer})
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str | None = None) -> Response:
        """Start a run (its process is spawned by a Celery worker); 409 when one is active."""
        return self._state_change(request, lifecycle.start)

    @extend_schema(request=None, responses={202: PipelineRunSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        """Ask the active run to stop its query; 409 when none is active."""
        return self._state_change(request, lifecycle.stop)

    @extend_schema(responses=PipelineRunSerializer(many=True))
    @action(detail=True, methods=["get"])
    def runs(self, request: Request, pk: str | None = None) -> Response:
        runs = self.get_object().runs.all()
        page = self.paginate_queryset(runs)
        if page is not None:
            return self.get_paginated_response(PipelineRunSerializer(page, many=True).data)
        return Response(PipelineRunSerializer(runs, many=True).data)
