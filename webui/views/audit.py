"""The audit log page (admins only): newest first, filtered by user, action and resource."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from api.models import AuditEntry
from api.permissions import ADMIN
from api.serializers.audit import AuditQuerySerializer
from api.views.audit import filtered
from webui.views.base import PAGE_SIZE, role_required


@role_required(ADMIN)
def audit_list(request: HttpRequest) -> HttpResponse:
    data = {f: request.GET[f] for f in ("user", "action", "resource") if request.GET.get(f)}
    query = AuditQuerySerializer(data=data)
    valid = query.is_valid()
    entries = filtered(AuditEntry.objects.all(), query.validated_data if valid else {})
    if not valid:
        entries = entries.none()
    page = Paginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
    params = request.GET.copy()
    params.pop("page", None)
    return render(
        request,
        "webui/audit/list.html",
        {
            "page": page,
            "filter": data,
            "errors": {} if valid else query.errors,
            "querystring": params.urlencode(),
        },
        status=200 if valid else 400,
    )
