"""Client quotas, as kafka-configs --entity-type users/clients/ips shows and changes them."""

from __future__ import annotations

from collections.abc import Sequence

from broker.client.admin_security import SecurityOperations
from broker.client.errors import check
from broker.client.models import (
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilterComponent,
)

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49


def entity_label(entity: ClientQuotaEntity) -> str:
    """`user=alice,client-id=<default>`: how an error names the entity it concerns."""
    return ",".join(
        f"{entity_type}={'<default>' if name is None else name}"
        for entity_type, name in sorted(entity.entries.items())
    )


class QuotaOperations(SecurityOperations):
    async def describe_client_quotas(
        self, components: Sequence[ClientQuotaFilterComponent] = (), strict: bool = False
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        """Each entity matching every component, with its quotas. `strict` leaves out the
        entities having types beyond the components'; no component without it lists all."""

        async def attempt() -> dict[ClientQuotaEntity, dict[str, float]]:
            session = await self.any_session()
            response = await session.send(
                session.request(
                    DESCRIBE_CLIENT_QUOTAS,
                    "DescribeClientQuotasRequest",
                    components=tuple(
                        session.request(
                            DESCRIBE_CLIENT_QUOTAS,
                            "ComponentData",
                            entity_type=c.entity_type,
                            match_type=c.match_type,
                            match=c.match,
                        )
                        for c in components
                    ),
                    strict=strict,
                )
            )
            check(response.error_code, response.error_message)
            return {
                ClientQuotaEntity({e.entity_type: e.entity_name for e in entry.entity}): {
                    v.key: v.value for v in entry.values
                }
                for entry in response.entries or ()
            }

        return await self.retrying(attempt)

    async def alter_client_quotas(
        self, alterations: Sequence[ClientQuotaAlteration], validate_only: bool = False
    ) -> None:
        """Set and remove quotas; the broker answers per entity, and the first entity it
        refused raises (INVALID_REQUEST with its reason), naming the entity as its resource.
        `validate_only` checks everything and changes nothing."""

        async def attempt() -> None:
            session = await self.controller()
            response = await session.send(
                session.request(
                    ALTER_CLIENT_QUOTAS,
                    "AlterClientQuotasRequest",
                    entries=tuple(_entry(session, a) for a in alterations),
                    validate_only=validate_only,
                )
            )
            for r in response.entries:
                entity = ClientQuotaEntity({e.entity_type: e.entity_name for e in r.entity})
                check(r.error_code, r.error_message, entity_label(entity))

        await self.retrying(attempt)


def _entry(session, alteration: ClientQuotaAlteration):
    return session.request(
        ALTER_CLIENT_QUOTAS,
        "EntryData",
        entity=tuple(
            session.request(ALTER_CLIENT_QUOTAS, "EntityData", entity_type=t, entity_name=n)
            for t, n in alteration.entity.entries.items()
        ),
        ops=tuple(
            # The wire's value is ignored when removing: 0.0 is what Kafka's client sends.
            session.request(
                ALTER_CLIENT_QUOTAS,
                "OpData",
                key=key,
                value=0.0 if value is None else float(value),
                remove=value is None,
            )
            for key, value in alteration.ops.items()
        ),
    )
