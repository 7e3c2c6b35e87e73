from __future__ import annotations

from django.db import transaction
from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from api import audit, kafka
from api.jobs import export_path
from api.models import Job
from api.permissions import OPERATOR
from api.serializers.errors import errors
from api.serializers.jobs import (
    ExportTopicJobSerializer,
    ImportTopicJobSerializer,
    JobSerializer,
    ResetOffsetsJobSerializer,
)
from api.tasks import run_job


def start_job(request: Request, kind: str, params: dict) -> Job:
    """A pending job, handed to a Celery worker once the row is committed (a worker must not
    look for it earlier)."""
    job = Job.objects.create(kind=kind, params=params, created_by=request.user)
    transaction.on_commit(lambda: run_job.delay(str(job.pk)))
    audit.note(request, resource=f"job/{job.pk}", kind=kind, **params)
    return job


class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Long admin operations run by the Celery worker, with their progress."""

    queryset = Job.objects.select_related("created_by")
    serializer_class = JobSerializer
    action_roles = {"download": OPERATOR}

    def _start(self, request: Request, kind: str, serializer_class: type) -> Response:
        serializer = serializer_class(data=request.data)
        serializer.is_valid(raise_exception=True)
        if isinstance(serializer, ImportTopicJobSerializer):
            kafka.call(serializer.target_check())
        job = start_job(request, kind, serializer.job_params())
        return Response(
            JobSerializer(job, context=self.get_serializer_context()).data,
            status=status.HTTP_202_ACCEPTED,
        )

    @extend_schema(request=ResetOffsetsJobSerializer, responses={202: JobSerializer})
    @action(detail=False, methods=["post"], url_path="reset-offsets")
    def reset_offsets(self, request: Request) -> Response:
        return self._start(request, Job.Kind.RESET_OFFSETS, ResetOffsetsJobSerializer)

    @extend_schema(request=ExportTopicJobSerializer, responses={202: JobSerializer})
    @action(detail=False, methods=["post"], url_path="export-topic")
    def export_topic(self, request: Request) -> Response:
        return self._start(request, Job.Kind.EXPORT_TOPIC, ExportTopicJobSerializer)

    @extend_schema(request=ImportTopicJobSerializer, responses={202: JobSerializer, **errors()})
    @action(
        detail=False,
        methods=["post"],
        url_path="import-topic",
        parser_classes=[MultiPartParser],
    )
    def import_topic(self, request: Request) -> Response:
        """Upload an export (multipart) and produce its records to an existing topic."""
        return self._start(request, Job.Kind.IMPORT_TOPIC, ImportTopicJobSerializer)

    @extend_schema(responses={(200, "application/x-ndjson"): OpenApiTypes.BINARY})
    @action(detail=True, methods=["get"])
    def download(self, request: Request, pk: str | None = None) -> FileResponse:
        """The JSON-lines file of a finished export."""
        job = self.get_object()
        path = export_path(job)
        if (
            job.kind != Job.Kind.EXPORT_TOPIC
            or job.state != Job.State.SUCCEEDED
            or not path.exists()
        ):
            raise NotFound("This job has no export to download.")
        return FileResponse(
            path.open("rb"),
            as_attachment=True,
            filename=path.name,
            content_type="application/x-ndjson",
        )
