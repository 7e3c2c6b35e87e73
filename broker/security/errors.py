"""Why a SASL exchange failed, and whether the client may be told (Kafka's SaslException
versus SaslAuthenticationException)."""

from __future__ import annotations


class SaslError(Exception):
    """A failed exchange whose detail stays in the broker's log: the client gets Kafka's
    generic "invalid credentials" message, so it cannot probe which users exist."""


class SaslAuthenticationError(SaslError):
    """A failed exchange whose message is safe to send to the client as it is."""
