"""Console pages for SCRAM users (admins only): the list with a create-or-replace form, and
deletion with confirmation. Passwords are never shown back, nor written to the audit log."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from api import audit
from api.permissions import ADMIN
from api.serializers.users import MECHANISMS, ScramDeleteQuerySerializer, ScramUpsertSerializer
from api.views.users import delete_credentials, users_data
from webui.views.base import BrokerCallFailed, broker_call, confirmed_call, paginate, role_required


def render_list(
    request: HttpRequest, form: Any = None, errors: Any = None, status: int = 200
) -> HttpResponse:
    try:
        credentials = broker_call(request, lambda admin: admin.describe_user_scram_credentials())
    except BrokerCallFailed:
        credentials = {}
    page, q = paginate(request, users_data(credentials), lambda u: u["name"])
    return render(
        request,
        "webui/users/list.html",
        {
            "page": page,
            "q": q,
            "form": form or {"mechanism": "SCRAM-SHA-512", "iterations": 4096},
            "errors": errors or {},
            "mechanisms": MECHANISMS,
        },
        status=status,
    )


@role_required(ADMIN)
def user_list(request: HttpRequest) -> HttpResponse:
    return render_list(request)


@role_required(ADMIN)
def user_create(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return redirect("webui:user-list")
    data = {
        f: request.POST[f]
        for f in ("name", "mechanism", "iterations", "password")
        if request.POST.get(f, "") != ""
    }
    serializer = ScramUpsertSerializer(data=data)
    # The form comes back without the password.
    form = {k: v for k, v in request.POST.items() if k != "password"}
    if not serializer.is_valid():
        return render_list(request, form, serializer.errors, status=400)
    d = serializer.validated_data
    audit.note(
        request, resource=f"user/{d['name']}", mechanism=d["mechanism"], iterations=d["iterations"]
    )
    try:
        broker_call(
            request,
            lambda admin: admin.upsert_user_scram_credential(
                d["name"], d["password"], d["mechanism"], d["iterations"]
            ),
        )
    except BrokerCallFailed:
        return render_list(request, form, status=400)
    messages.success(request, f"{d['mechanism']} credential of {d['name']} saved.")
    return redirect("webui:user-list")


@role_required(ADMIN)
def user_delete(request: HttpRequest, name: str) -> HttpResponse:
    query = ScramDeleteQuerySerializer(data=request.GET)
    if not query.is_valid():
        messages.error(request, "Unknown SCRAM mechanism.")
        return redirect("webui:user-list")
    mechanism = query.validated_data.get("mechanism")
    if request.method == "POST":
        audit.note(request, mechanism=mechanism or "all")
    what = f"the {mechanism} credential" if mechanism else "every SCRAM credential"
    return confirmed_call(
        request,
        lambda admin: delete_credentials(admin, name, mechanism),
        resource=f"user/{name}",
        done=f"{mechanism or 'Every'} credential of {name} deleted.",
        success_url=reverse("webui:user-list"),
        cancel_url=reverse("webui:user-list"),
        title=f"Delete user {name}",
        message=f"Delete {what} of {name}? Clients authenticating with it will be refused.",
        action_label="Delete credential",
    )
