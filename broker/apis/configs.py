"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics, the broker and groups.
Describing needs DESCRIBE_CONFIGS, altering ALTER_CONFIGS, on the topic, the group, or for the
broker on the cluster."""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster
from broker.apis.base import NO_THROTTLE, KafkaError, RequestContext
from broker.config import (
    BROKER_CONFIGS,
    GROUP_CONFIGS,
    GROUP_TO_BROKER,
    TOPIC_CONFIGS,
    TOPIC_TO_BROKER,
    TYPE_IDS,
    ConfigError,
    render,
    validate_dynamic_broker_configs,
    validate_group_configs,
    validate_topic_configs,
)
from broker.security.operations import AclOperation, ResourceType

TOPIC = 2
BROKER = 4
# Kafka 4.x's ConfigResource.Type.GROUP (KIP-848's draft said 16, which became CLIENT_METRICS).
GROUP = 32

# DescribeConfigs config_source values.
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
GROUP_CONFIG = 8
_BROKER_SOURCE = {
    "dynamic": DYNAMIC_BROKER_CONFIG,
    "static": STATIC_BROKER_CONFIG,
    "default": DEFAULT_CONFIG,
}

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    config_source: int
    synonyms: tuple[tuple[str, str | None, int], ...]
    config_type: int
    documentation: str


def _broker_entry(broker, name: str) -> ConfigEntry:
    d = BROKER_CONFIGS[name]
    source = _BROKER_SOURCE[broker.config.source(name)]
    # Kafka never sends the value of a password config (sensitive), only that it is set.
    value = None if d.type == "password" else render(broker.config[name])
    return ConfigEntry(
        name,
        value,
        not d.dynamic,
        source,
        ((name, value, source),),
        d.type_id,
        d.doc,
    )


def _overridable_entries(broker, defs, to_broker, overrides, override_source) -> list[ConfigEntry]:
    """Entries of a resource whose configs override broker defaults (topics, groups)."""
    entries = []
    for name, d in defs.items():
        synonym = _broker_entry(broker, to_broker[name])
        synonyms = synonym.synonyms
        if name in overrides:
            value = render(d.parse(overrides[name]))
            source = override_source
            synonyms = ((name, value, source), *synonyms)
        else:
            value, source = synonym.value, synonym.config_source
        entries.append(ConfigEntry(name, value, False, source, synonyms, d.type_id, d.doc))
    return entries


def describe_topic_entries(broker, overrides: dict[str, str | None]) -> list[ConfigEntry]:
    return _overridable_entries(
        broker, TOPIC_CONFIGS, TOPIC_TO_BROKER, overrides, DYNAMIC_TOPIC_CONFIG
    )


def _resource_entries(broker, resource_type: int, name: str) -> list[ConfigEntry]:
    if resource_type == TOPIC:
        topic = broker.image.topic(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
        return describe_topic_entries(broker, topic.configs)
    if resource_type == BROKER:
        _check_broker_name(broker, name)
        return [_broker_entry(broker, n) for n in BROKER_CONFIGS]
    if resource_type == GROUP:
        return _overridable_entries(
            broker, GROUP_CONFIGS, GROUP_TO_BROKER, broker.group_configs.get(name, {}), GROUP_CONFIG
        )
    raise KafkaError(ErrorCode.invalid_request, f"Unsupported resource type {resource_type}")


# The resource a config resource is authorized as, and the code and message of a refusal.
_ACL_RESOURCES = {
    TOPIC: (ResourceType.TOPIC, ErrorCode.topic_authorization_failed, "Topic"),
    GROUP: (ResourceType.GROUP, ErrorCode.group_authorization_failed, "Group"),
    BROKER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed, "Cluster"),
}


def _authorize(broker, ctx, operation: AclOperation, resource_type: int, name: str, told: bool):
    """Raise the resource's *_AUTHORIZATION_FAILED unless `operation` is allowed on it; `told`:
    with Kafka's message (DescribeConfigs has one, the alter APIs none)."""
    if resource_type not in _ACL_RESOURCES:
        return
    acl_resource, code, what = _ACL_RESOURCES[resource_type]
    if acl_resource is ResourceType.CLUSTER:
        allowed = authorize_cluster(broker, ctx, operation)
    else:
        allowed = broker.authorize(ctx, operation, acl_resource, name)
    if not allowed:
        raise KafkaError(code, f"{what} authorization failed." if told else None)


def _check_broker_name(broker, name: str) -> None:
    if name not in ("", str(broker.node_id)):
        raise KafkaError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}",
        )


def handle_describe_configs(broker, ctx: RequestContext, request) -> object:
    results = []
    for r in request.resources:
        try:
            _authorize(
                broker,
                ctx,
                AclOperation.DESCRIBE_CONFIGS,
                r.resource_type,
                r.resource_name,
                told=True,
            )
            entries = _resource_entries(broker, r.resource_type, r.resource_name)
            code, message = ErrorCode.none, None
        except KafkaError as e:
            entries, code, message = [], e.code, e.message
        if r.configuration_keys is not None:
            keys = set(r.configuration_keys)
            entries = [e for e in entries if e.name in keys]
        configs = tuple(
            ctx.response(
                "DescribeConfigsResourceResult",
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=e.config_source,
                is_default=(e.config_source == DEFAULT_CONFIG),
                is_sensitive=(e.config_type == TYPE_IDS["password"]),
                synonyms=tuple(
                    ctx.response("DescribeConfigsSynonym", name=n, value=v, source=s)
                    for n, v, s in e.synonyms
                )
                if request.include_synonyms
                else (),
                config_type=e.config_type,
                documentation=e.documentation
                if getattr(request, "include_documentation", False)
                else None,
            )
            for e in entries
        )
        results.append(
            ctx.response(
                "DescribeConfigsResult",
                error_code=code,
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=configs,
            )
        )
    return ctx.response(
        "DescribeConfigsResponse", throttle_time=NO_THROTTLE, results=tuple(results)
    )


async def handle_alter_configs(broker, ctx: RequestContext, request) -> object:
    """The legacy API: the given configs replace all of the resource's dynamic configs."""
    return await _alter(
        broker, ctx, request, lambda current, r: {c.name: c.value for c in r.configs}
    )


async def handle_incremental_alter_configs(broker, ctx: RequestContext, request) -> object:
    return await _alter(broker, ctx, request, _apply_operations)


def _apply_operations(current: dict[str, str], resource) -> dict[str, str]:
    names = [c.name for c in resource.configs]
    if len(names) != len(set(names)):
        raise KafkaError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    updated = dict(current)
    defs = {TOPIC: TOPIC_CONFIGS, GROUP: GROUP_CONFIGS}.get(resource.resource_type, BROKER_CONFIGS)
    for c in resource.configs:
        d = defs.get(c.name)
        if d is None:
            raise KafkaError(ErrorCode.invalid_config, f"Unknown configuration {c.name!r}")
        if c.config_operation == SET:
            updated[c.name] = c.value
        elif c.config_operation == DELETE:
            updated.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            if d.type != "list":
                verb = "append" if c.config_operation == APPEND else "subtract"
                raise KafkaError(
                    ErrorCode.invalid_config,
                    f"Config value {verb} is not allowed for config key: {c.name}",
                )
            current_value = updated.get(c.name)
            if current_value is None:  # as Kafka: unset, the list starts from its default
                current_value = render(d.default) or ""
            items = [i for i in current_value.split(",") if i]
            given = [i.strip() for i in (c.value or "").split(",") if i.strip()]
            if c.config_operation == APPEND:
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            updated[c.name] = ",".join(items)
        else:
            raise KafkaError(
                ErrorCode.invalid_request, f"Unknown config operation {c.config_operation}"
            )
    return updated


async def _alter(broker, ctx: RequestContext, request, compute) -> object:
    responses = []
    for r in request.resources:
        code, message = ErrorCode.none, None
        try:
            _authorize(
                broker,
                ctx,
                AclOperation.ALTER_CONFIGS,
                r.resource_type,
                r.resource_name,
                told=False,
            )
            if r.resource_type == TOPIC:
                topic = broker.image.topic(r.resource_name)
                if topic is None:
                    raise KafkaError(
                        ErrorCode.unknown_topic_or_partition,
                        f"Topic {r.resource_name} does not exist",
                    )
                configs = compute(dict(topic.configs), r)
                _validated(validate_topic_configs, configs)
                if not request.validate_only:
                    await broker.set_topic_configs(topic.name, configs)
            elif r.resource_type == GROUP:
                if not r.resource_name:
                    raise KafkaError(ErrorCode.invalid_group_id, "The group id is empty")
                configs = compute(dict(broker.group_configs.get(r.resource_name, {})), r)
                _validated(lambda c: validate_group_configs(c, broker.config), configs)
                if not request.validate_only:
                    await broker.set_group_configs(r.resource_name, configs)
            elif r.resource_type == BROKER:
                _check_broker_name(broker, r.resource_name)
                configs = compute(dict(broker.dynamic_broker_configs), r)
                configs = {k: v for k, v in configs.items() if v is not None}
                _validated(validate_dynamic_broker_configs, configs)
                if not request.validate_only:
                    await broker.set_broker_configs(configs)
            else:
                raise KafkaError(
                    ErrorCode.invalid_request, f"Unsupported resource type {r.resource_type}"
                )
        except KafkaError as e:
            code, message = e.code, e.message
        responses.append(
            ctx.response(
                "AlterConfigsResourceResponse",
                error_code=code,
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
        )
    return ctx.response(
        request.__class__.__name__.replace("Request", "Response"),
        throttle_time=NO_THROTTLE,
        responses=tuple(responses),
    )


def _validated(validate, configs) -> None:
    try:
        validate(configs)
    except ConfigError as e:
        raise KafkaError(ErrorCode.invalid_config, str(e)) from None
