from __future__ import annotations

import json
from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from api import audit
from api.kafka import BrokerUnavailable
from api.permissions import OPERATOR
from api.serializers.pipelines import PipelineSerializer
from broker.client import KafkaAdminError
from pipelines import lifecycle, principal, sql
from pipelines.models import Pipeline
from webui.views.base import require_role_to_post, role_required


def _form_data(request: HttpRequest) -> dict:
    """The POSTed form as the REST API takes it: topics comma-separated, options as JSON."""
    writable = set(PipelineSerializer.Meta.fields) - set(PipelineSerializer.Meta.read_only_fields)
    data = {k: v.strip() for k, v in request.POST.items() if k in writable}
    topics = data.get("source_topics", "")
    data["source_topics"] = [t.strip() for t in topics.split(",") if t.strip()]
    options = request.POST.get("options", "").strip()
    try:
        data["options"] = json.loads(options) if options else {}
    except ValueError:
        data["options"] = options  # refused by the serializer, with the field named
    return data


@role_required()
def pipeline_list(request: HttpRequest) -> HttpResponse:
    pipelines = Pipeline.objects.prefetch_related("runs")
    rows = [(p, p.latest_run) for p in pipelines]
    return render(request, "webui/pipelines/list.html", {"rows": rows})


@role_required()
def pipeline_create(request: HttpRequest) -> HttpResponse:
    require_role_to_post(request, OPERATOR)
    errors: dict = {}
    values = request.POST if request.method == "POST" else {}
    if request.method == "GET":
        sql.warm_up()  # ready by the time the form is sent
    if request.method == "POST":
        serializer = PipelineSerializer(data=_form_data(request))
        try:
            valid = serializer.is_valid()
        except sql.CheckerUnavailable as e:  # nothing was decided: the form stays as written
            valid, errors = False, {"transformation": [str(e)]}
        if valid:
            try:
                pipeline = lifecycle.define(serializer, created_by=request.user)
            except (BrokerUnavailable, KafkaAdminError) as e:
                errors = {"principal": [f"could not make the pipeline's principal: {e}"]}
            else:
                audit.note(request, resource=f"pipeline/{pipeline.name}")
                return redirect("webui:pipeline-detail", pk=pipeline.pk)
        elif not errors:
            errors = serializer.errors
    return render(
        request,
        "webui/pipelines/create.html",
        {"errors": errors, "values": values},
        status=400 if errors else 200,
    )


def _principal(pipeline: Pipeline) -> dict:
    """Who the pipeline runs as, and the ACLs the broker holds for it (or why none show)."""
    if not principal.authenticated():
        return {"name": None}
    shown = {"name": principal.principal(pipeline), "acls": [], "error": ""}
    try:
        shown["acls"] = principal.acls(pipeline)
    except KafkaAdminError as e:
        shown["error"] = (
            "The broker has no authorizer: its principals, this one too, may do everything."
            if e.name == "SECURITY_DISABLED"
            else str(e)
        )
    except BrokerUnavailable as e:
        shown["error"] = str(e)
    return shown


@role_required()
def pipeline_detail(request: HttpRequest, pk: int) -> HttpResponse:
    pipeline = get_object_or_404(Pipeline, pk=pk)
    runs = list(pipeline.runs.all()[:20])
    return render(
        request,
        "webui/pipelines/detail.html",
        {
            "pipeline": pipeline,
            "principal": _principal(pipeline),
            "security_protocol": settings.FJORD_SECURITY_PROTOCOL,
            "run": runs[0] if runs else None,
            "runs": runs,
            "active": lifecycle.active_run(pipeline) is not None,
            "error": request.GET.get("error", ""),
            "pipeline_config": {
                "pipeline": pipeline.pk,
                "websocket_path": "/ws/dashboard/",
                "api_url": reverse("api:pipeline-detail", args=[pipeline.pk]),
                "window_seconds": 300,
                # Samples taken before the page (the latest stored one comes first on
                # connect) would show an older state than the page does.
                "rendered_at": timezone.now().isoformat(),
            },
        },
    )


@require_POST
@role_required(OPERATOR)
def pipeline_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    pipeline = get_object_or_404(Pipeline, pk=pk)
    audit.note(request, resource=f"pipeline/{pipeline.name}", action=action)
    change = {"start": lifecycle.start, "stop": lifecycle.stop}[action]
    try:
        change(pipeline)
    except (lifecycle.PipelineStateError, BrokerUnavailable, KafkaAdminError) as e:
        detail = reverse("webui:pipeline-detail", args=[pipeline.pk])
        return redirect(f"{detail}?{urlencode({'error': str(e)})}")
    return redirect("webui:pipeline-detail", pk=pipeline.pk)
