"""What a pipeline's Spark processes inherit: the environment of its run process without the
control plane's secrets. Spark's JVM starts as a child of the run process and its Python
workers as children of the JVM, so whatever os.environ holds when the session starts is
theirs (`System.getenv` in the JVM, `os.environ` in a worker); the run process needs those
secrets only to set Django up, which is done by then."""

from __future__ import annotations

import os
import re

from broker.redaction import has_credentials

# The control plane's own: its Django key, its stores, its broker identity, its first admin.
CONTROL_PLANE = {
    "DJANGO_SECRET_KEY",
    "DATABASE_URL",
    "REDIS_URL",
    "FJORD_SASL_USERNAME",
    "FJORD_SASL_PASSWORD",
    "FJORD_SSL_CERTFILE",
    "FJORD_SSL_KEYFILE",
    "FJORD_ADMIN_PASSWORD",
}
# Whatever else names a secret (PGPASSWORD, AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, ...).
SECRET_NAME = re.compile(r"PASSW|SECRET|TOKEN|CREDENTIAL|PRIVATE|(^|_)KEY($|_)|^PG", re.I)


def scrub_environment() -> list[str]:
    """Remove the control plane's secrets, and anything that looks like one, from os.environ;
    returns the names removed."""
    removed = [
        name
        for name, value in os.environ.items()
        if name in CONTROL_PLANE or SECRET_NAME.search(name) or has_credentials(value)
    ]
    for name in removed:
        del os.environ[name]
    return removed
