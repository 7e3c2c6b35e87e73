"""Client quotas, as kafka-configs --entity-type users/clients/ips shows and changes them.

An entity is a map of entity type to name where null is the type's default entity:
`{"user": "alice", "client_id": null}` is alice's quota for any client id without one of its
own. Which combinations and keys are valid, and which values, is the broker's to say (Kafka's
rules, answered as INVALID_REQUEST): the serializers only check the shape."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from broker.client.models import ClientQuotaEntity, ClientQuotaFilterComponent

# The API's names of Kafka's entity types (client_id is "client-id" on the wire), in the order
# lists sort by.
ENTITY_TYPES = {
    "user": ClientQuotaEntity.USER,
    "client_id": ClientQuotaEntity.CLIENT_ID,
    "ip": ClientQuotaEntity.IP,
}
# Kafka's quota keys, for forms and help texts: user and client-id entities take the first
# four, ip entities the last. Bytes and connections per second are whole numbers.
QUOTA_KEYS = (
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
    "connection_creation_rate",
)
KEYS_HELP = f"Kafka's quota keys: {', '.join(QUOTA_KEYS)}"


def entity_of(data: dict[str, str | None]) -> ClientQuotaEntity:
    return ClientQuotaEntity({ENTITY_TYPES[t]: name for t, name in data.items()})


def entity_data(entity: ClientQuotaEntity) -> dict[str, str | None]:
    """The API's form of an entity, its types in the order of ENTITY_TYPES."""
    entries = entity.entries
    return {api: entries[wire] for api, wire in ENTITY_TYPES.items() if wire in entries}


def name_field(**kwargs: Any) -> serializers.CharField:
    """An entity name, exact as Kafka matches it (whitespace kept)."""
    return serializers.CharField(required=False, max_length=32767, trim_whitespace=False, **kwargs)


def entity_name_field() -> serializers.CharField:
    return name_field(
        allow_null=True,
        help_text="A name, or null for the default entity; left out: not part of the entity",
    )


def filter_name_field() -> serializers.CharField:
    return name_field(allow_blank=True, help_text="Matches the entity of that name")


class QuotaEntitySerializer(serializers.Serializer):
    """A user, a client id, both, or an ip alone; null names the type's default entity."""

    user = entity_name_field()
    client_id = entity_name_field()
    ip = entity_name_field()

    def to_representation(self, instance: dict[str, str | None]) -> dict[str, str | None]:
        # Only the entity's types: a type left out is not the null of its default entity.
        return {t: instance[t] for t in self.fields if t in instance}

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        attrs = super().to_internal_value(data)
        # The fields would drop an unknown type silently, leaving another entity than meant.
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            allowed = ", ".join(ENTITY_TYPES)
            raise serializers.ValidationError(
                {t: [f"Not an entity type: an entity has {allowed}."] for t in unknown}
            )
        return attrs


class QuotaValueField(serializers.FloatField):
    """A quota value: whole numbers are answered as integers (bytes/s, connections/s), the
    others as Kafka stores them, doubles."""

    def to_representation(self, value: float) -> int | float:
        value = float(value)
        return int(value) if value.is_integer() else value


class QuotaEntrySerializer(serializers.Serializer):
    entity = QuotaEntitySerializer()
    quotas = serializers.DictField(child=QuotaValueField(), help_text=KEYS_HELP)


class QuotaAlterSerializer(serializers.Serializer):
    """Set quotas of an entity: the keys given are set (null removes one), the others keep
    their values, as kafka-configs --alter --add-config does."""

    entity = QuotaEntitySerializer()
    quotas = serializers.DictField(
        child=QuotaValueField(allow_null=True), allow_empty=False, help_text=KEYS_HELP
    )
    validate_only = serializers.BooleanField(
        default=False, help_text="Only check the change with the broker; change nothing"
    )


class QuotaRemoveSerializer(serializers.Serializer):
    """Remove some quota keys of an entity, or all of them."""

    entity = QuotaEntitySerializer()
    keys = serializers.ListField(
        child=serializers.CharField(max_length=255),
        required=False,
        allow_empty=False,
        help_text="Every key the entity has when left out",
    )


class QuotaFilterSerializer(serializers.Serializer):
    """Which entities to list (DescribeClientQuotas' filter): each named type matches that
    name, `default` types their default entity, `any` types any entity of the type; an entity
    must match every one. Empty names are no filter."""

    user = filter_name_field()
    client_id = filter_name_field()
    ip = filter_name_field()
    default = serializers.MultipleChoiceField(
        choices=list(ENTITY_TYPES), required=False, help_text="Types to match the default of"
    )
    any = serializers.MultipleChoiceField(
        choices=list(ENTITY_TYPES), required=False, help_text="Types to match any entity of"
    )
    strict = serializers.BooleanField(
        default=False, help_text="Leave out entities having types the filter does not name"
    )

    def components(self) -> list[ClientQuotaFilterComponent]:
        """The filter components; a type named twice goes to the broker as it is, which
        refuses it (INVALID_REQUEST), as kafka-configs' describe would be refused."""
        d = self.validated_data
        found = [
            ClientQuotaFilterComponent.of_entity(wire, d[api])
            for api, wire in ENTITY_TYPES.items()
            if d.get(api)
        ]
        found += [
            ClientQuotaFilterComponent.of_default_entity(ENTITY_TYPES[t])
            for t in sorted(d.get("default", ()))
        ]
        found += [
            ClientQuotaFilterComponent.of_entity_type(ENTITY_TYPES[t])
            for t in sorted(d.get("any", ()))
        ]
        return found
