"""The audit log: every mutating call, through the REST API or the console, is recorded with
its user and outcome, refused and failed ones included.

A middleware does it, so no view can forget. It runs after the view, when DRF has put the
token-authenticated user on Django's request too. A view adds what the URL does not say (the
ACL binding it created, the offsets it reset) with `note(request, ...)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from api.models import AuditEntry
from broker.client.models import ConfigResourceType

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# Fields never written to the log, wherever they appear in a detail.
SECRET_FIELDS = frozenset({"password", "secret", "token", "salt", "salted_password"})


def note(request: Any, resource: str | None = None, **detail: Any) -> None:
    """Attach what the audit entry of this request should say beyond its URL."""
    django_request = getattr(request, "_request", request)
    if resource is not None:
        django_request.fjord_audit_resource = resource
    recorded = getattr(django_request, "fjord_audit_detail", {})
    recorded.update(redacted(detail))
    django_request.fjord_audit_detail = recorded


def note_config_changes(
    request: Any, resource_type: ConfigResourceType, name: str, changed: dict[str, Any]
) -> None:
    """What an IncrementalAlterConfigs SETs and DELETEs: the values, but only the names for a
    broker, whose configs hold passwords and JAAS text."""
    to_set = changed["set"]
    note(
        request,
        resource=f"{resource_type.name.lower()}/{name}",
        set=sorted(to_set) if resource_type == ConfigResourceType.BROKER else to_set,
        delete=changed["delete"],
    )


def redacted(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            storable(str(k)): "***" if str(k).lower() in SECRET_FIELDS else redacted(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redacted(v) for v in value]
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    return storable(str(value))


def storable(text: str) -> str:
    """PostgreSQL's jsonb refuses NUL characters, which a request may carry: the log keeps
    U+FFFD in their place."""
    return text.replace("\x00", "\ufffd")


def _resource(request: HttpRequest) -> str:
    explicit = getattr(request, "fjord_audit_resource", None)
    if explicit is not None:
        return explicit
    match = request.resolver_match
    if match is None or not match.kwargs:
        return ""
    return ",".join(f"{k}={v}" for k, v in match.kwargs.items())


def _kafka_error(response: HttpResponse) -> str:
    data = getattr(response, "data", None)
    if isinstance(data, dict):
        return str(data.get("kafka_error", ""))
    return ""


class AuditMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.method not in SAFE_METHODS and request.resolver_match is not None:
            user = getattr(request, "user", None)
            authenticated = user is not None and user.is_authenticated
            AuditEntry.objects.create(
                user=user if authenticated else None,
                username=user.get_username() if authenticated else "",
                remote_addr=request.META.get("REMOTE_ADDR") or None,
                method=request.method or "",
                path=request.path[:500],
                action=request.resolver_match.view_name[:200],
                resource=_resource(request)[:500],
                status_code=response.status_code,
                kafka_error=_kafka_error(response),
                detail=getattr(request, "fjord_audit_detail", {}),
            )
        return response
