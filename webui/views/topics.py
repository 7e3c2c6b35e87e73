"""Console pages for topics: list and create, describe, configs, partitions, delete, and a
records browser with a "produce test record" form. Input goes through the API's serializers,
so a form shows exactly the field errors the REST API would answer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import register_converter, reverse
from rest_framework import serializers

from api import audit
from api.disk_usage import disk_usage
from api.permissions import OPERATOR
from api.serializers.topics import (
    PartitionsCreateSerializer,
    RecordProduceSerializer,
    RecordQuerySerializer,
    RecordSerializer,
    TopicCreateSerializer,
    parse_config_lines,
)
from broker.client import PartitionReader, Producer
from broker.client.models import ConfigResourceType, NewTopic
from webui.views.base import (
    BrokerCallFailed,
    broker_call,
    confirmed_call,
    paginate,
    require_role_to_post,
    role_required,
    validated,
)
from webui.views.configs import configs_page


class TopicNameConverter:
    """`<topic:name>` in webui/urls.py: the names a topic can have, dots included; any other
    path is no topic's page (a 404 before the broker is asked)."""

    regex = "[a-zA-Z0-9._-]{1,249}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


# Registered on import: webui/urls.py imports this module before its patterns use it.
register_converter(TopicNameConverter, "topic")


def filled(post: Any, *fields: str) -> dict[str, str]:
    """The form's non-empty fields: an empty input means "the default", as an absent JSON key."""
    return {f: post[f] for f in fields if post.get(f, "").strip() != ""}


def lines_field(data: dict[str, Any], errors: dict[str, Any], post: Any, field: str) -> None:
    """A `key=value`-per-line textarea into data[field], or its errors into errors[field]."""
    try:
        data[field] = parse_config_lines(post.get(field, ""))
    except serializers.ValidationError as e:
        errors[field] = e.detail


@dataclass(frozen=True)
class Sized:
    """A topic or partition for a page, with its size on disk (None when the broker does not
    say)."""

    item: Any
    size_bytes: int | None


# --- list, create, delete ---


@role_required()
def topic_list(request: HttpRequest) -> HttpResponse:
    internal = request.GET.get("internal") == "on"
    try:
        topics = broker_call(request, lambda admin: admin.list_topics(include_internal=internal))
    except BrokerCallFailed:
        topics = []
    usage = disk_usage() if topics else None
    rows = [Sized(t, usage.topic_size(t.name) if usage else None) for t in topics]
    page, q = paginate(request, rows, lambda row: row.item.name)
    return render(
        request,
        "webui/topics/list.html",
        {"page": page, "q": q, "internal": internal, "form": {}, "errors": {}},
    )


@role_required(OPERATOR)
def topic_create(request: HttpRequest) -> HttpResponse:
    form: dict[str, Any] = {}
    errors: dict[str, Any] = {}
    if request.method == "POST":
        form = request.POST
        data: dict[str, Any] = filled(request.POST, "name", "partitions", "replication_factor")
        lines_field(data, errors, request.POST, "configs")
        serializer = validated(TopicCreateSerializer, data, errors)
        if serializer is not None:
            v = serializer.validated_data
            new = NewTopic(v["name"], v["partitions"], v["replication_factor"], v["configs"])
            audit.note(request, resource=f"topic/{new.name}", partitions=new.num_partitions)
            try:
                broker_call(request, lambda admin: admin.create_topics([new]))
            except BrokerCallFailed:
                pass
            else:
                messages.success(request, f"Topic {new.name} created.")
                return redirect("webui:topic-detail", name=new.name)
    status = 400 if errors else 200
    return render(
        request, "webui/topics/create.html", {"form": form, "errors": errors}, status=status
    )


@role_required(OPERATOR)
def topic_delete(request: HttpRequest, name: str) -> HttpResponse:
    return confirmed_call(
        request,
        lambda admin: admin.delete_topics([name]),
        resource=f"topic/{name}",
        done=f"Topic {name} deleted.",
        success_url=reverse("webui:topic-list"),
        cancel_url=reverse("webui:topic-detail", args=[name]),
        title=f"Delete topic {name}",
        message=f"Delete topic {name} and every record in it? This cannot be undone.",
        action_label="Delete topic",
    )


# --- describe, partitions ---


def describe(request: HttpRequest, name: str) -> Any:
    return broker_call(request, lambda admin: admin.describe_topics([name]))[0]


@role_required()
def topic_detail(request: HttpRequest, name: str) -> HttpResponse:
    try:
        topic = describe(request, name)
    except BrokerCallFailed:
        return render(
            request, "webui/topics/detail.html", {"name": name, "topic": None}, status=404
        )
    usage = disk_usage()
    sizes = usage.partition_sizes(name) if usage else {}
    context = {
        "name": name,
        "topic": topic,
        "partitions": [Sized(p, sizes.get(p.partition)) for p in topic.partitions],
        "size_bytes": usage.topic_size(name) if usage else None,
    }
    return render(request, "webui/topics/detail.html", context)


@role_required(OPERATOR)
def topic_partitions(request: HttpRequest, name: str) -> HttpResponse:
    errors: dict[str, Any] = {}
    form: Any = {}
    if request.method == "POST":
        form = request.POST
        serializer = validated(PartitionsCreateSerializer, filled(request.POST, "count"), errors)
        if serializer is not None:
            count = serializer.validated_data["count"]
            audit.note(request, resource=f"topic/{name}", count=count)
            try:
                broker_call(request, lambda admin: admin.create_partitions({name: count}))
            except BrokerCallFailed:
                pass
            else:
                messages.success(request, f"Topic {name} now has {count} partitions.")
                return redirect("webui:topic-detail", name=name)
    try:
        topic = describe(request, name)
    except BrokerCallFailed:
        topic = None
    return render(
        request,
        "webui/topics/partitions.html",
        {"name": name, "topic": topic, "form": form, "errors": errors},
        status=400 if errors else 200,
    )


@role_required()
def topic_configs(request: HttpRequest, name: str) -> HttpResponse:
    require_role_to_post(request, OPERATOR)
    return configs_page(
        request,
        ConfigResourceType.TOPIC,
        name,
        noun=f"topic {name}",
        template="webui/topics/configs.html",
        context={"name": name},
        success_url=reverse("webui:topic-configs", args=[name]),
    )


# --- records ---


@role_required()
def topic_records(request: HttpRequest, name: str) -> HttpResponse:
    """GET browses (partition, offset or timestamp, limit, isolation); POST produces."""
    require_role_to_post(request, OPERATOR)
    if request.method == "POST":
        return _produce(request, name)
    return _records_page(request, name, produce_form={}, produce_errors={})


def _records_page(
    request: HttpRequest,
    name: str,
    *,
    produce_form: Any,
    produce_errors: dict[str, Any],
    status: int = 200,
) -> HttpResponse:
    query_errors: dict[str, Any] = {}
    records: list[dict[str, Any]] = []
    next_offset = None
    browsed = bool(request.GET)
    query = validated(
        RecordQuerySerializer,
        filled(request.GET, "partition", "offset", "timestamp", "limit", "isolation"),
        query_errors,
    )
    if query is not None:
        q = query.validated_data
        start = query.start()
        try:
            found = broker_call(
                request,
                lambda reader: reader.read(
                    name,
                    q["partition"],
                    max_records=q["limit"],
                    isolation_level=q["isolation"],
                    **start,
                ),
                PartitionReader,
            )
        except BrokerCallFailed:
            found = []
        records = [
            {**r, "time": datetime.fromtimestamp(r["timestamp"] / 1000, UTC)}
            if r["timestamp"] >= 0
            else r
            for r in RecordSerializer(found, many=True).data
        ]
        next_offset = found[-1].offset + 1 if found else None
        query_data = q
    else:
        query_data = {}
    try:
        topic = describe(request, name)
    except BrokerCallFailed:
        topic = None
    return render(
        request,
        "webui/topics/records.html",
        {
            "name": name,
            "topic": topic,
            "query": request.GET,
            "query_data": query_data,
            "query_errors": query_errors,
            "browsed": browsed,
            "records": records,
            "next_offset": next_offset,
            "produce_form": produce_form,
            "produce_errors": produce_errors,
        },
        status=400 if (query_errors or produce_errors) and status == 200 else status,
    )


def _produce(request: HttpRequest, name: str) -> HttpResponse:
    errors: dict[str, Any] = {}
    data: dict[str, Any] = filled(request.POST, "partition", "value_encoding", "key_encoding")
    # An empty key field is a record without a key; an empty value is an empty value.
    if request.POST.get("key", "") != "":
        data["key"] = request.POST["key"]
    data["value"] = request.POST.get("value", "")
    lines_field(data, errors, request.POST, "headers")
    serializer = validated(RecordProduceSerializer, data, errors)
    if serializer is not None:
        kwargs = serializer.send_kwargs()
        audit.note(request, resource=f"topic/{name}", partition=kwargs["partition"])
        try:
            metadata = broker_call(
                request, lambda producer: producer.send_and_wait(name, **kwargs), Producer
            )
        except BrokerCallFailed:
            pass
        else:
            messages.success(
                request,
                f"Produced to partition {metadata.partition} at offset {metadata.offset}.",
            )
            url = reverse("webui:topic-records", args=[name])
            return redirect(f"{url}?partition={metadata.partition}&offset={metadata.offset}")
    return _records_page(request, name, produce_form=request.POST, produce_errors=errors)
