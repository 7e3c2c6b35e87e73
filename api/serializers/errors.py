"""The error bodies of the API in its OpenAPI schema (api.errors makes them)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers


class FieldErrorsSerializer(serializers.Serializer):
    """400 for invalid input: the messages of each field (non_field_errors for the whole);
    or, when the broker refused the request as invalid, a Kafka error body."""

    non_field_errors = serializers.ListField(child=serializers.CharField(), required=False)
    detail = serializers.CharField(required=False)
    kafka_error = serializers.CharField(required=False)
    kafka_error_code = serializers.IntegerField(required=False)


class KafkaErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
    kafka_error = serializers.CharField(required=False, help_text="e.g. GROUP_ID_NOT_FOUND")
    kafka_error_code = serializers.IntegerField(required=False)
    resource = serializers.CharField(required=False)


ERROR_DESCRIPTIONS = {
    400: "Invalid input (errors by field) or a request the broker refused as invalid",
    401: "No or bad credentials",
    403: "The role does not allow it, or the broker refused authorization",
    404: "No such resource (the Kafka error names it), or no such page of a list",
    409: "The resource's state does not allow it (the Kafka error names why)",
    503: "The broker is unavailable or the error is retriable",
    504: "The broker did not answer in time",
}


def errors(*statuses: int) -> dict[int, Any]:
    """Error responses for `@extend_schema(responses={200: ..., **errors(409)})`: 400, 401,
    403, 404, 503 and 504 always, plus those named."""
    documented = sorted({400, 401, 403, 404, 503, 504, *statuses})
    return {
        status: OpenApiResponse(
            FieldErrorsSerializer if status == 400 else KafkaErrorSerializer,
            description=ERROR_DESCRIPTIONS[status],
        )
        for status in documented
    }
