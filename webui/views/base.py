"""What every console page shares: roles, broker calls that end in a message instead of an
error page, search and pagination of lists, and confirmation of destructive actions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any, TypeVar

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from rest_framework import serializers

from api import audit, kafka
from api.errors import kafka_error_body
from api.kafka import BrokerUnavailable
from api.permissions import VIEWER, has_role
from api.views.base import search
from broker.client import KafkaAdminError

T = TypeVar("T")

PAGE_SIZE = 25


def role_required(
    role: str = VIEWER,
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Log in first, then hold at least `role` (api.permissions), else 403."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @login_required
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not has_role(request.user, role):
                raise PermissionDenied(f"This page needs the {role} role.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


def require_role_to_post(request: HttpRequest, role: str) -> None:
    """Pages anyone may read but only `role` may submit."""
    if request.method == "POST" and not has_role(request.user, role):
        raise PermissionDenied(f"This change needs the {role} role.")


class BrokerCallFailed(Exception):
    """A broker call failed and the user was told why; the page renders without its data."""


def broker_call(request: HttpRequest, operation: Callable[[Any], Any], client: Any = None) -> Any:
    """`kafka.call(operation)`, turning a Kafka error into a message on the page (with the error
    name, as the API answers it) and BrokerCallFailed for the view to handle."""
    try:
        if client is None:
            return kafka.call(operation)
        return kafka.call(operation, client)
    except KafkaAdminError as e:
        body = kafka_error_body(e)
        messages.error(request, f"{body['kafka_error']}: {body['detail']}")
    except BrokerUnavailable as e:
        messages.error(request, f"BROKER_NOT_AVAILABLE: {e}")
    except TimeoutError:
        messages.error(request, "REQUEST_TIMED_OUT: the broker did not answer in time.")
    raise BrokerCallFailed


def validated(
    serializer_class: type[serializers.Serializer], data: dict[str, Any], errors: dict[str, Any]
) -> serializers.Serializer | None:
    """The serializer when the data is valid and no field failed before it, else None with its
    errors merged into `errors`."""
    serializer = serializer_class(data=data)
    if serializer.is_valid() and not errors:
        return serializer
    for field, field_errors in serializer.errors.items():
        errors.setdefault(field, field_errors)
    return None


def paginate(request: HttpRequest, items: Sequence[T], key: Callable[[T], str]) -> tuple[Page, str]:
    """The page of items asked for by ?page=, filtered by ?q=; and the search term."""
    term = request.GET.get("q", "").strip()
    paginator = Paginator(search(items, term, key), PAGE_SIZE)
    return paginator.get_page(request.GET.get("page")), term


def confirmed_call(
    request: HttpRequest,
    operation: Callable[[Any], Any],
    *,
    resource: str,
    done: str,
    success_url: str,
    cancel_url: str,
    title: str,
    message: str,
    action_label: str,
) -> HttpResponse:
    """A destructive broker call behind a confirmation page: GET asks, POST calls and
    redirects to success_url, or back to cancel_url with the Kafka error shown."""
    if request.method != "POST":
        return confirm(
            request, title=title, message=message, action_label=action_label, cancel_url=cancel_url
        )
    audit.note(request, resource=resource)
    try:
        broker_call(request, operation)
    except BrokerCallFailed:
        return redirect(cancel_url)
    messages.success(request, done)
    return redirect(success_url)


def confirm(
    request: HttpRequest, *, title: str, message: str, action_label: str, cancel_url: str
) -> HttpResponse:
    """The page a destructive action shows on GET; its form POSTs back to the same URL."""
    return render(
        request,
        "webui/confirm.html",
        {
            "title": title,
            "message": message,
            "action_label": action_label,
            "cancel_url": cancel_url,
        },
    )
