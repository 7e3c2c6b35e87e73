"""SCRAM users, as kafka-configs --entity-type users shows and changes them. Passwords go in,
never out: the broker keeps only a salted hash, the API answers mechanism and iterations."""

from __future__ import annotations

from rest_framework import serializers

from broker.security.scram import MAX_ITERATIONS, MIN_ITERATIONS

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
USER_NAME = r"^[^/\x00-\x1f\x7f]{1,255}$"


class ScramCredentialSerializer(serializers.Serializer):
    mechanism = serializers.ChoiceField(MECHANISMS)
    iterations = serializers.IntegerField()


class ScramUserSerializer(serializers.Serializer):
    name = serializers.CharField()
    credentials = ScramCredentialSerializer(many=True)


class ScramUpsertSerializer(serializers.Serializer):
    """Create or replace a user's credential for one mechanism."""

    name = serializers.RegexField(
        USER_NAME, help_text="The SASL user name (no slash or control characters)"
    )
    mechanism = serializers.ChoiceField(MECHANISMS, default="SCRAM-SHA-512")
    iterations = serializers.IntegerField(
        min_value=MIN_ITERATIONS, max_value=MAX_ITERATIONS, default=MIN_ITERATIONS
    )
    password = serializers.CharField(
        write_only=True,
        trim_whitespace=False,
        max_length=1024,
        style={"input_type": "password"},
        help_text="Never answered or recorded; the broker keeps a salted hash.",
    )


class ScramDeleteQuerySerializer(serializers.Serializer):
    mechanism = serializers.ChoiceField(
        MECHANISMS, required=False, help_text="Every mechanism of the user when left out"
    )
