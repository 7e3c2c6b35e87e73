"""Console pages for ACLs: a filtered list, a create form and deletion with confirmation.
Input goes through the API's serializers: the form shows the field errors the API answers."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from api import audit
from api.permissions import ADMIN
from api.serializers.acls import (
    OPERATIONS,
    PATTERN_TYPES,
    PERMISSION_TYPES,
    RESOURCE_TYPES,
    AclBindingSerializer,
    AclFilterSerializer,
)
from api.views.acls import binding_label
from broker.client.models import AclBindingFilter
from webui.views.base import BrokerCallFailed, broker_call, confirm, paginate, role_required

FIELDS = [
    "resource_type",
    "resource_name",
    "pattern_type",
    "principal",
    "host",
    "operation",
    "permission_type",
]
CHOICES = {
    "resource_types": [m.name for m in RESOURCE_TYPES],
    "pattern_types": [m.name for m in PATTERN_TYPES],
    "operations": [m.name for m in OPERATIONS],
    "permission_types": [m.name for m in PERMISSION_TYPES],
}


def filled(data: Any) -> dict[str, str]:
    """The non-empty binding fields of a form: an empty input means "any" or "the default"."""
    return {f: data[f] for f in FIELDS if data.get(f, "").strip() != ""}


@role_required()
def acl_list(request: HttpRequest) -> HttpResponse:
    query = AclFilterSerializer(data=filled(request.GET))
    bindings: list = []
    valid = query.is_valid()
    if valid:
        try:
            bindings = broker_call(request, lambda admin: admin.describe_acls(query.acl_filter()))
        except BrokerCallFailed:
            pass
    rows = [
        {**AclBindingSerializer(b).data, "query": urlencode(AclBindingSerializer(b).data)}
        for b in bindings
    ]
    page, q = paginate(request, rows, lambda r: f"{r['resource_name']} {r['principal']}")
    return render(
        request,
        "webui/acls/list.html",
        {
            "page": page,
            "q": q,
            "filter": request.GET,
            "errors": {} if valid else query.errors,
            **CHOICES,
        },
        status=200 if valid else 400,
    )


@role_required(ADMIN)
def acl_create(request: HttpRequest) -> HttpResponse:
    form: Any = {"pattern_type": "LITERAL", "host": "*", "permission_type": "ALLOW"}
    errors: Any = {}
    if request.method == "POST":
        form = request.POST
        serializer = AclBindingSerializer(data=filled(request.POST))
        if serializer.is_valid():
            binding = serializer.binding()
            data = AclBindingSerializer(binding).data
            audit.note(request, resource=binding_label(data), binding=data)
            try:
                broker_call(request, lambda admin: admin.create_acls([binding]))
            except BrokerCallFailed:
                pass
            else:
                messages.success(request, f"ACL created: {binding_label(data)}.")
                return redirect(
                    f"{reverse('webui:acl-list')}?{urlencode({'resource_name': binding.resource_name})}"
                )
        else:
            errors = serializer.errors
    return render(
        request,
        "webui/acls/create.html",
        {"form": form, "errors": errors, **CHOICES},
        status=400 if errors else 200,
    )


@role_required(ADMIN)
def acl_delete(request: HttpRequest) -> HttpResponse:
    """Deletes exactly the binding named by the query string."""
    serializer = AclBindingSerializer(data=filled(request.GET))
    if not serializer.is_valid():
        messages.error(request, f"Not an ACL binding: {dict(serializer.errors)}")
        return redirect("webui:acl-list")
    data = AclBindingSerializer(serializer.binding()).data
    label = binding_label(data)
    if request.method == "POST":
        exact = AclBindingFilter(**serializer.validated_data)
        audit.note(request, resource=label, binding=data)
        try:
            deleted = broker_call(request, lambda admin: admin.delete_acls([exact]))
        except BrokerCallFailed:
            return redirect("webui:acl-list")
        audit.note(request, deleted=len(deleted))
        if deleted:
            messages.success(request, f"ACL deleted: {label}.")
        else:
            messages.warning(request, f"No such ACL: {label}.")
        return redirect("webui:acl-list")
    return confirm(
        request,
        title="Delete ACL",
        message=f"Delete the ACL {data['permission_type']} {data['principal']} from "
        f"{data['host']} to {data['operation']} {data['resource_type']} "
        f"{data['pattern_type']} {data['resource_name']}?",
        action_label="Delete ACL",
        cancel_url=reverse("webui:acl-list"),
    )
