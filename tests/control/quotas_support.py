"""What the quota tests of the control plane share. Quotas live on the session's broker, where
a default entity's quota applies to every other test's clients too: the tests set only values
far above what tests produce, and remove every quota they leave (conftest's clean_quotas)."""

from __future__ import annotations

from broker.client.models import ClientQuotaAlteration

# Far above any test's traffic: set on a default entity, it throttles no one.
HARMLESS_BYTE_RATE = 10**12


async def remove_every_quota(admin) -> None:
    described = await admin.describe_client_quotas()
    if described:
        await admin.alter_client_quotas(
            [ClientQuotaAlteration(e, dict.fromkeys(quotas)) for e, quotas in described.items()]
        )
