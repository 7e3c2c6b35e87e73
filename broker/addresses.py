"""Client addresses in one spelling, so that limits and quotas keyed by address match however
the address was written or seen."""

from __future__ import annotations

import ipaddress


def normalise_address(address: str) -> str:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address  # not an IP (a Unix socket, "?"): counted under its own name
    # A dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d; count them as a.b.c.d.
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)
