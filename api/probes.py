"""Checks of the broker that need no Kafka protocol, shared by the API and the console."""

import socket

from django.conf import settings


def broker_reachability(timeout: float = 1.0) -> dict[str, str]:
    """Whether a bootstrap server in FJORD_BOOTSTRAP accepts a TCP connection.

    The broker counts as reachable as soon as one of them does, as it would for a Kafka client
    bootstrapping from the same list.
    """
    bootstrap = settings.FJORD_BOOTSTRAP
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        if not port.isdigit():
            continue
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                return {"bootstrap": bootstrap, "status": "reachable"}
        except OSError:
            continue
    return {"bootstrap": bootstrap, "status": "unreachable"}
