"""Console pages for client quotas: a filtered list, a form that sets one entity's quotas and
removal with confirmation. Input goes through the API's serializers, and the broker's refusals
(a fractional byte rate, an ip with a user) come back as messages with Kafka's error name.

Pages name an entity in the query string as the API's list filter does: `user=alice` for a
named entity, `default=client_id` for a type's default entity."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse

from api import audit
from api.permissions import ADMIN
from api.serializers.quotas import (
    ENTITY_TYPES,
    QUOTA_KEYS,
    QuotaAlterSerializer,
    QuotaFilterSerializer,
    QuotaValueField,
    entity_of,
)
from api.views.quotas import describe_entity, entries_data, quota_label, remove_quotas
from broker.client.admin_quotas import entity_label
from broker.client.models import ClientQuotaAlteration
from webui.views.base import BrokerCallFailed, broker_call, confirmed_call, paginate, role_required

TYPE_LABELS = {"user": "user", "client_id": "client id", "ip": "ip"}


def entity_from_query(query: QueryDict) -> tuple[dict[str, str | None], dict[str, list[str]]]:
    """The entity a page's query or form names (API names, None for a default) and the
    errors of its fields."""
    defaults = set(query.getlist("default"))
    entity: dict[str, str | None] = {}
    errors: dict[str, list[str]] = {}
    for t in ENTITY_TYPES:
        # Names are exact, as Kafka matches them: a row's links must name its entity again.
        name = query.get(t, "")
        if name and t in defaults:
            errors[t] = [f"Name a {TYPE_LABELS[t]} or take the default, not both."]
        elif name or t in defaults:
            entity[t] = name or None
    if not entity and not errors:
        errors["non_field_errors"] = ["Name a user, a client id, both, or an ip."]
    return entity, errors


def entity_query(entity: dict[str, str | None], **extra: str) -> str:
    return urlencode(
        [(t, name) if name is not None else ("default", t) for t, name in entity.items()]
        + list(extra.items())
    )


def entity_text(entity: dict[str, str | None]) -> str:
    return ", ".join(
        f"{TYPE_LABELS[t]} {'(default)' if name is None else name}" for t, name in entity.items()
    )


def type_fields(source: Any, errors: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The entity fields of a filter or form, filled in from the query or form data."""
    defaults, anys = source.getlist("default"), source.getlist("any")
    return [
        {
            "name": t,
            "label": label,
            "value": source.get(t, ""),
            "default": t in defaults,
            "any": t in anys,
            "errors": (errors or {}).get(t),
        }
        for t, label in TYPE_LABELS.items()
    ]


def shown(value: float) -> int | float:
    return QuotaValueField().to_representation(value)


@role_required()
def quota_list(request: HttpRequest) -> HttpResponse:
    query = QuotaFilterSerializer(data=request.GET)
    described: dict = {}
    valid = query.is_valid()
    if valid:
        components, strict = query.components(), query.validated_data["strict"]
        try:
            described = broker_call(
                request, lambda admin: admin.describe_client_quotas(components, strict)
            )
        except BrokerCallFailed:
            pass
    rows = [
        {
            "entity": entity_text(e["entity"]),
            "query": entity_query(e["entity"]),
            "quotas": [
                (key, shown(value), entity_query(e["entity"], key=key))
                for key, value in e["quotas"].items()
            ],
        }
        for e in entries_data(described)
    ]
    page, q = paginate(request, rows, lambda r: r["entity"])
    return render(
        request,
        "webui/quotas/list.html",
        {
            "page": page,
            "q": q,
            "types": type_fields(request.GET),
            "strict": request.GET.get("strict") == "true",
            "errors": {} if valid else query.errors,
        },
        status=200 if valid else 400,
    )


@role_required(ADMIN)
def quota_set(request: HttpRequest) -> HttpResponse:
    """The form shows the entity's quotas; saving makes them so: filled keys are set, keys
    emptied are removed. "Validate only" asks the broker without changing anything."""
    source = request.POST if request.method == "POST" else request.GET
    values: dict[str, Any] = {k: source.get(k, "") for k in QUOTA_KEYS}
    # The keys the form was shown with: emptied, they are removed.
    shown_keys = [k for k in source.getlist("shown") if k in QUOTA_KEYS]
    entity, errors = entity_from_query(source)
    status = 200
    if request.method == "POST":
        validate_only = source.get("validate_only") == "on"
        if errors or not _save(request, entity, shown_keys, errors, validate_only):
            status = 400
        elif not validate_only:
            return redirect(f"{reverse('webui:quota-list')}?{entity_query(entity, strict='true')}")
    elif not source:
        errors = {}  # a blank form to fill in
    elif not errors:
        try:
            current = broker_call(request, lambda admin: describe_entity(admin, entity_of(entity)))
        except BrokerCallFailed:
            current = {}
        values.update({key: shown(value) for key, value in current.items()})
        shown_keys = sorted(current)
    return render(
        request,
        "webui/quotas/set.html",
        {
            "types": type_fields(source, errors),
            "quotas": [(k, values[k], errors.get(k)) for k in QUOTA_KEYS],
            "shown_keys": shown_keys,
            "validate_only": source.get("validate_only") == "on",
            "errors": errors,
        },
        status=status,
    )


def _save(
    request: HttpRequest,
    entity: dict[str, str | None],
    shown_keys: list[str],
    errors: dict[str, Any],
    validate_only: bool,
) -> bool:
    """Set the form's quotas; False with `errors` or the page's messages saying why not."""
    filled = {k: request.POST[k] for k in QUOTA_KEYS if request.POST.get(k, "").strip()}
    quotas = {**dict.fromkeys(k for k in shown_keys if k not in filled), **filled}
    if not quotas:
        errors["non_field_errors"] = ["Fill in at least one quota."]
        return False
    serializer = QuotaAlterSerializer(
        data={"entity": entity, "quotas": quotas, "validate_only": validate_only}
    )
    if not serializer.is_valid():
        # The entity's errors are by type, the quotas' by key: the form's fields either way.
        for field_errors in serializer.errors.values():
            if isinstance(field_errors, dict):
                errors.update(field_errors)
            else:
                errors.setdefault("non_field_errors", []).extend(field_errors)
        return False
    d = serializer.validated_data
    target = entity_of(d["entity"])
    audit.note(
        request, resource=quota_label(target), quotas=d["quotas"], validate_only=validate_only
    )
    try:
        broker_call(
            request,
            lambda admin: admin.alter_client_quotas(
                [ClientQuotaAlteration(target, d["quotas"])], validate_only
            ),
        )
    except BrokerCallFailed:
        return False
    done = "The broker accepts the quotas of" if validate_only else "Quotas saved for"
    messages.success(request, f"{done} {entity_text(entity)}.")
    return True


@role_required(ADMIN)
def quota_delete(request: HttpRequest) -> HttpResponse:
    """Removes one key (`key=`) or every quota of the entity the query names."""
    entity, errors = entity_from_query(request.GET)
    if errors:
        messages.error(request, f"Not a quota entity: {errors}")
        return redirect("webui:quota-list")
    key = request.GET.get("key") or None
    keys = [key] if key else None
    target = entity_of(entity)
    what = f"the {key} quota" if key else "every quota"
    if request.method == "POST":
        audit.note(request, keys=keys or "all")
    return confirmed_call(
        request,
        lambda admin: remove_quotas(admin, target, keys),
        resource=quota_label(target),
        done=f"Removed {what} of {entity_text(entity)}.",
        success_url=reverse("webui:quota-list"),
        cancel_url=reverse("webui:quota-list"),
        title=f"Remove quotas of {entity_label(target)}",
        message=f"Remove {what} of {entity_text(entity)}? Its clients fall back to the next "
        "quota that applies to them, or to none.",
        action_label="Remove",
    )
