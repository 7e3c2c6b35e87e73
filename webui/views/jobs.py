from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from api.models import Job
from api.permissions import OPERATOR, has_role
from api.serializers.jobs import (
    ExportTopicJobSerializer,
    ImportTopicJobSerializer,
    ResetOffsetsJobSerializer,
)
from api.views.jobs import start_job
from webui.views.base import BrokerCallFailed, broker_call, role_required

FORMS = {
    Job.Kind.RESET_OFFSETS: ResetOffsetsJobSerializer,
    Job.Kind.EXPORT_TOPIC: ExportTopicJobSerializer,
    Job.Kind.IMPORT_TOPIC: ImportTopicJobSerializer,
}


def _form_data(request: HttpRequest) -> dict:
    """The POSTed form as the serializer expects it: lists from comma-separated fields, blank
    optional fields left out."""
    data = {k: v.strip() for k, v in request.POST.items() if k != "csrfmiddlewaretoken"}
    for field in ("topics", "partitions"):
        if field in data:
            data[field] = [item.strip() for item in data[field].split(",") if item.strip()]
    return {k: v for k, v in data.items() if v not in ("", [])}


@role_required()
def job_list(request: HttpRequest) -> HttpResponse:
    errors: dict = {}
    submitted = None
    if request.method == "POST":
        submitted = request.POST.get("kind")
        serializer_class = FORMS.get(submitted)
        if serializer_class is None:
            errors = {"kind": ["Choose a kind of job."]}
        elif not has_role(request.user, OPERATOR):
            raise PermissionDenied("Starting a job needs the operator role.")
        else:
            serializer = serializer_class(data={**_form_data(request), **request.FILES.dict()})
            if serializer.is_valid():
                try:
                    if isinstance(serializer, ImportTopicJobSerializer):
                        broker_call(request, serializer.target_check())
                except BrokerCallFailed:
                    pass  # the page shows the Kafka error
                else:
                    job = start_job(request, submitted, serializer.job_params())
                    return redirect("webui:job-detail", pk=job.pk)
            errors = serializer.errors
    return render(
        request,
        "webui/jobs/list.html",
        {
            "jobs": Job.objects.select_related("created_by")[:100],
            "errors": errors,
            "submitted": submitted,
            "values": request.POST if request.method == "POST" else request.GET,
        },
        status=400 if errors else 200,
    )


@role_required()
def job_detail(request: HttpRequest, pk: str) -> HttpResponse:
    return render(request, "webui/jobs/detail.html", {"job": get_object_or_404(Job, pk=pk)})
