"""Kafka errors as HTTP answers.

The broker validates (DESIGN.md: validation lives in one place), so a REST call fails the way
kafka-topics or kafka-acls would, with Kafka's error name beside a status a HTTP client can act
on: `{"detail": "...", "kafka_error": "TOPIC_ALREADY_EXISTS", "kafka_error_code": 36}`.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import page_not_found
from kio.schema.errors import ErrorCode
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from api.kafka import BrokerUnavailable
from broker.client import KafkaAdminError
from pipelines.sql import CheckerUnavailable

E = ErrorCode

NOT_FOUND = {
    E.unknown_topic_or_partition,
    E.unknown_topic_id,
    E.group_id_not_found,
    E.transactional_id_not_found,
    E.resource_not_found,
    E.unknown_member_id,
    E.unknown_producer_id,
}
CONFLICT = {
    E.topic_already_exists,
    E.non_empty_group,
    E.invalid_txn_state,
    E.concurrent_transactions,
    E.rebalance_in_progress,
    E.duplicate_resource,
    E.topic_deletion_disabled,
    E.group_subscribed_to_topic,
    E.producer_fenced,
}
FORBIDDEN = {
    E.topic_authorization_failed,
    E.group_authorization_failed,
    E.cluster_authorization_failed,
    E.transactional_id_authorization_failed,
    E.delegation_token_authorization_failed,
    E.security_disabled,
}
# The control plane's own credentials were refused: the broker, not the caller, said no.
BAD_GATEWAY = {E.sasl_authentication_failed, E.illegal_sasl_state, E.unsupported_sasl_mechanism}
TIMEOUT = {E.request_timed_out}


def http_status(code: int) -> int:
    """The HTTP status of a Kafka error code: 400 for a request the broker refuses as invalid,
    503 for a retriable condition that should clear up by itself."""
    try:
        error = ErrorCode(code)
    except ValueError:
        return status.HTTP_502_BAD_GATEWAY
    if error in NOT_FOUND:
        return status.HTTP_404_NOT_FOUND
    if error in CONFLICT:
        return status.HTTP_409_CONFLICT
    if error in FORBIDDEN:
        return status.HTTP_403_FORBIDDEN
    if error in BAD_GATEWAY:
        return status.HTTP_502_BAD_GATEWAY
    if error in TIMEOUT:
        return status.HTTP_504_GATEWAY_TIMEOUT
    if error.retriable:
        return status.HTTP_503_SERVICE_UNAVAILABLE
    return status.HTTP_400_BAD_REQUEST


def kafka_error_body(error: KafkaAdminError) -> dict[str, Any]:
    readable = error.name.replace("_", " ").capitalize()
    body: dict[str, Any] = {
        "detail": f"{readable}: {error.message}" if error.message else readable,
        "kafka_error": error.name,
        "kafka_error_code": error.code,
    }
    if error.resource is not None:
        body["resource"] = error.resource
    return body


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus Kafka errors, an unreachable broker, a broker that did not answer
    in time and a pipeline's SQL checker that did not answer; anything else stays a 500 for
    Django to log."""
    if isinstance(exc, KafkaAdminError):
        return Response(kafka_error_body(exc), status=http_status(exc.code))
    if isinstance(exc, BrokerUnavailable):
        return Response(
            {"detail": str(exc), "kafka_error": "BROKER_NOT_AVAILABLE"},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
    if isinstance(exc, CheckerUnavailable):
        return Response({"detail": str(exc)}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
    if isinstance(exc, TimeoutError):
        return Response(
            {"detail": "The broker did not answer in time.", "kafka_error": "REQUEST_TIMED_OUT"},
            status=status.HTTP_504_GATEWAY_TIMEOUT,
        )
    return drf_exception_handler(exc, context)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 404 handler: JSON under /api/, where no route matched (an id a lookup pattern
    refuses), as DRF answers inside a route; the site's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
    return page_not_found(request, exception)
