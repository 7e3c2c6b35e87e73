"""Config pages of topics, groups and brokers: one table that is also the edit form
(webui/_configs_form.html), applied with IncrementalAlterConfigs as the API's PATCH is."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from rest_framework import serializers

from api import audit
from api.serializers.topics import (
    CONFIG_SOURCES,
    DYNAMIC_SOURCES,
    ConfigAlterSerializer,
    parse_config_lines,
)
from broker.client.models import ConfigEntry, ConfigResourceType
from webui.views.base import BrokerCallFailed, broker_call, validated


def config_rows(entries: list[ConfigEntry]) -> list[dict[str, Any]]:
    return [
        {
            "name": e.name,
            "value": e.value,
            "source": CONFIG_SOURCES.get(e.source, "UNKNOWN"),
            "dynamic": e.source in DYNAMIC_SOURCES,
            "read_only": e.read_only,
            "sensitive": e.is_sensitive,
        }
        for e in sorted(entries, key=lambda e: e.name)
    ]


def config_changes(post: Any, entries: list[ConfigEntry]) -> dict[str, Any]:
    """The edit form as ConfigAlterSerializer data: every editable value that differs from the
    current one is SET; every ticked "reset" is DELETEd. A sensitive config left blank keeps
    its (hidden) value."""
    to_set: dict[str, str] = {}
    to_delete: list[str] = []
    for e in entries:
        if e.read_only:
            continue
        if post.get(f"reset:{e.name}"):
            to_delete.append(e.name)
            continue
        value = post.get(f"config:{e.name}")
        if value is None or (e.is_sensitive and value == ""):
            continue
        if value != (e.value or ""):
            to_set[e.name] = value
    try:
        to_set.update(parse_config_lines(post.get("extra", "")))
    except serializers.ValidationError as e:
        return {"set": to_set, "delete": to_delete, "extra_errors": e.detail}
    return {"set": to_set, "delete": to_delete}


def edit_configs(
    request: HttpRequest, resource_type: ConfigResourceType, name: str
) -> tuple[list[ConfigEntry] | None, dict[str, Any], bool]:
    """Describe the resource's configs and, on POST, apply the edit form: (entries, errors,
    whether a change was made)."""
    errors: dict[str, Any] = {}
    try:
        entries = broker_call(request, lambda admin: admin.describe_configs(resource_type, name))
    except BrokerCallFailed:
        return None, errors, False
    if request.method != "POST":
        return entries, errors, False
    data = config_changes(request.POST, entries)
    if "extra_errors" in data:
        errors["extra"] = data.pop("extra_errors")
    serializer = validated(ConfigAlterSerializer, data, errors)
    if serializer is None:
        return entries, errors, False
    audit.note_config_changes(request, resource_type, name, data)
    ops = serializer.operations()
    try:
        broker_call(
            request, lambda admin: admin.incremental_alter_configs(resource_type, name, ops)
        )
    except BrokerCallFailed:
        return entries, errors, False
    return entries, errors, True


def configs_page(
    request: HttpRequest,
    resource_type: ConfigResourceType,
    name: str,
    *,
    noun: str,
    template: str,
    context: dict[str, Any],
    success_url: str,
) -> HttpResponse:
    """Show the resource's configs and, on POST, apply the form; 404 when the broker cannot
    describe them (the error is shown as a message)."""
    entries, errors, changed = edit_configs(request, resource_type, name)
    if changed:
        messages.success(request, f"Configs of {noun} updated.")
        return redirect(success_url)
    context = {
        **context,
        "rows": config_rows(entries or []),
        "errors": errors,
        "found": entries is not None,
    }
    status = 404 if entries is None else 400 if errors else 200
    return render(request, template, context, status=status)
