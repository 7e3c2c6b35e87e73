"""CreateTopics, DeleteTopics, CreatePartitions. Validation as Kafka does it; the broker object
owns the state changes (store, image, logs). Creating needs CREATE on the cluster or the topic
(and DESCRIBE_CONFIGS on it to see its configs in the answer), deleting DELETE, adding
partitions ALTER on the topic."""

from __future__ import annotations

import contextlib
from datetime import timedelta

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import creatable_topics, filter_authorized
from broker.apis.base import KafkaError, RequestContext
from broker.apis.configs import describe_topic_entries
from broker.config import ConfigError, validate_topic_configs
from broker.controller.placement import (
    PlacementError,
    assignment_problem,
    replication_problem,
    unusable_assignment,
)
from broker.metadata.image import topic_name_problem
from broker.quota.quota_manager import ControllerMutationQuota, monotonic_ms
from broker.security.operations import AclOperation, ResourceType

AUTHORIZATION_FAILED = "Authorization failed."
THROTTLED = "The throttling quota has been exceeded."


def _mutation_quota(broker, ctx: RequestContext, strict_since: int) -> ControllerMutationQuota:
    """KIP-599: the versions that know THROTTLING_QUOTA_EXCEEDED get it per topic once the
    client's controller_mutation_rate is spent; older ones are only throttled."""
    return broker.quotas.controller_mutation.quota(
        broker.quotas.configs,
        ctx.user,
        ctx.client_id or "",
        ctx.api_version >= strict_since,
        monotonic_ms(),
    )


def _spend(quota: ControllerMutationQuota, partitions: int) -> None:
    if quota.exceeded():
        raise KafkaError(ErrorCode.throttling_quota_exceeded, THROTTLED)
    quota.record(partitions)


def _throttle_time(broker, quota: ControllerMutationQuota) -> timedelta:
    broker.quotas.controller_mutation.throttled(quota)
    return timedelta(milliseconds=quota.throttle_ms)


async def handle_create_topics(broker, ctx: RequestContext, request) -> object:
    results = []
    seen: dict[str, int] = {}
    for t in request.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    creatable = creatable_topics(broker, ctx, seen)
    quota = _mutation_quota(broker, ctx, strict_since=6)
    describable = filter_authorized(
        broker, ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, seen
    )
    for t in request.topics:
        try:
            if seen[t.name] > 1:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    f"Create topics request from client contains a duplicate topic {t.name}",
                )
            if t.name not in creatable:
                raise KafkaError(ErrorCode.topic_authorization_failed, AUTHORIZATION_FAILED)
            partitions, configs, replication, assignment = _validate_creation(broker, t)
            if request.validate_only:
                topic = None
            else:
                _spend(quota, partitions)
                with _placing(assignment):
                    topic = await broker.create_topic(
                        t.name, partitions, configs, replication, assignment
                    )
        except KafkaError as e:
            results.append(
                ctx.response(
                    "CreatableTopicResult",
                    name=t.name,
                    topic_id=None,
                    error_code=e.code,
                    error_message=e.message,
                    topic_config_error_code=0,
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=None,
                )
            )
            continue
        results.append(
            ctx.response(
                "CreatableTopicResult",
                name=t.name,
                topic_id=topic.topic_id if topic else None,
                error_code=ErrorCode.none,
                error_message=None,
                topic_config_error_code=ErrorCode.none
                if t.name in describable
                else ErrorCode.topic_authorization_failed,
                num_partitions=partitions,
                replication_factor=replication,
                configs=tuple(
                    ctx.response(
                        "CreatableTopicConfigs",
                        name=e.name,
                        value=e.value,
                        read_only=e.read_only,
                        config_source=e.config_source,
                        is_sensitive=False,
                    )
                    for e in describe_topic_entries(broker, configs)
                )
                if ctx.has("CreatableTopicConfigs") and t.name in describable
                else None,
            )
        )
    return ctx.response(
        "CreateTopicsResponse", throttle_time=_throttle_time(broker, quota), topics=tuple(results)
    )


def _validate_creation(broker, t) -> tuple[int, dict[str, str], int, list | None]:
    problem = topic_name_problem(t.name)
    if problem:
        raise KafkaError(ErrorCode.invalid_topic_exception, problem)
    if broker.image.topic(t.name) is not None:
        raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists.")
    collision = broker.image.colliding_topic(t.name)
    if collision:
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"Topic '{t.name}' collides with existing topic: {collision}",
        )
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            raise KafkaError(
                ErrorCode.invalid_request,
                "Both numPartitions or replicationFactor and replicasAssignments "
                "were set. Both cannot be used at the same time.",
            )
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                "Partitions must be numbered consecutively from 0",
            )
        partitions = len(indexes)
        by_index = {a.partition_index: tuple(a.broker_ids) for a in t.assignments}
        assignment = [by_index[i] for i in range(partitions)]
        _check_assignments(broker, assignment, None)
        replication = len(assignment[0])
    else:
        partitions = broker.config["num.partitions"] if t.num_partitions == -1 else t.num_partitions
        replication = (
            broker.config["default.replication.factor"]
            if t.replication_factor == -1
            else t.replication_factor
        )
        if partitions <= 0:
            raise KafkaError(
                ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
            )
        _check_replication(broker, replication)
        assignment = None
    _check_openable(broker, partitions)
    configs = {c.name: c.value for c in t.configs}
    try:
        validate_topic_configs(configs)
    except ConfigError as e:
        raise KafkaError(ErrorCode.invalid_config, str(e)) from None
    return partitions, configs, replication, assignment


def _check_openable(broker, new_partitions: int) -> None:
    """Kafka sets no bound, but a partition holds an open file here: a topic of a hundred
    thousand partitions would leave the broker no descriptor for any connection."""
    openable = broker.log_manager.partitions_openable()
    if new_partitions > openable:
        raise KafkaError(
            ErrorCode.invalid_partitions,
            f"{new_partitions} more partitions would exceed this broker's open-file limit "
            f"(ulimit -n): it can open {openable} more.",
        )


def _check_assignments(
    broker, assignment: list[tuple[int, ...]], replication: int | None, first_partition: int = 0
) -> None:
    """Hand-made replica lists: every one valid, as many replicas as `replication` (the
    first list's when None), and each with a usable broker to lead it."""
    registered = broker.image.brokers
    for replicas in assignment:
        problem = assignment_problem(replicas, registered, replication)
        if problem:
            raise KafkaError(ErrorCode.invalid_replica_assignment, problem)
        replication = len(replicas)
    problem = unusable_assignment(assignment, broker.usable_brokers(), first_partition)
    if problem:
        raise KafkaError(ErrorCode.invalid_replica_assignment, problem)


@contextlib.contextmanager
def _placing(assignment: list | None):
    """Brokers may have been fenced since the request was checked: the placer's refusal."""
    try:
        yield
    except PlacementError as e:
        code = (
            ErrorCode.invalid_replication_factor
            if assignment is None
            else ErrorCode.invalid_replica_assignment
        )
        raise KafkaError(code, str(e)) from None


def _check_replication(broker, replication: int) -> None:
    problem = replication_problem(replication, len(broker.usable_brokers()))
    if problem:
        raise KafkaError(ErrorCode.invalid_replication_factor, problem)


async def handle_delete_topics(broker, ctx: RequestContext, request) -> object:
    # v0-v5 send names in `topic_names`; v6 sends (name, topic id) pairs.
    if hasattr(request, "topic_names"):
        targets = [(name, None) for name in request.topic_names]
    else:
        targets = [(t.name, t.topic_id) for t in request.topics]
    results = []
    quota = _mutation_quota(broker, ctx, strict_since=5)
    for name, topic_id in targets:
        topic = broker.image.topic(name) if name is not None else broker.image.topic_by_id(topic_id)
        code, message = ErrorCode.none, None
        if not broker.config["delete.topic.enable"]:
            code, message = ErrorCode.topic_deletion_disabled, "Topic deletion is disabled."
        elif (topic is not None or name is not None) and not broker.authorize(
            ctx, AclOperation.DELETE, ResourceType.TOPIC, topic.name if topic else name
        ):
            # By name, refused whether or not it exists; a topic id is not a secret.
            code, message = ErrorCode.topic_authorization_failed, AUTHORIZATION_FAILED
            topic = None
        elif topic is None:
            code = (
                ErrorCode.unknown_topic_or_partition
                if name is not None
                else ErrorCode.unknown_topic_id
            )
        elif quota.exceeded():
            code, message = ErrorCode.throttling_quota_exceeded, THROTTLED
        else:
            quota.record(topic.partitions)
            await broker.delete_topic(topic.name)
        results.append(
            ctx.response(
                "DeletableTopicResult",
                name=topic.name if topic else name,
                topic_id=topic.topic_id if topic else topic_id,
                error_code=code,
                error_message=message,
            )
        )
    return ctx.response(
        "DeleteTopicsResponse",
        throttle_time=_throttle_time(broker, quota),
        responses=tuple(results),
    )


async def handle_create_partitions(broker, ctx: RequestContext, request) -> object:
    results = []
    alterable = filter_authorized(
        broker, ctx, AclOperation.ALTER, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    quota = _mutation_quota(broker, ctx, strict_since=3)
    for t in request.topics:
        code, message = ErrorCode.none, None
        topic = broker.image.topic(t.name)
        try:
            if t.name not in alterable:
                raise KafkaError(ErrorCode.topic_authorization_failed, AUTHORIZATION_FAILED)
            if topic is None:
                raise KafkaError(
                    ErrorCode.unknown_topic_or_partition, f"The topic '{t.name}' does not exist."
                )
            if t.count <= topic.partitions:
                raise KafkaError(
                    ErrorCode.invalid_partitions,
                    f"Topic currently has {topic.partitions} partitions, which is higher than "
                    f"or equal to the requested {t.count}."
                    if t.count < topic.partitions
                    else f"Topic already has {topic.partitions} partitions.",
                )
            replication = broker.image.partition(t.name, 0).replication_factor
            assignment = None
            if t.assignments is not None:
                if len(t.assignments) != t.count - topic.partitions:
                    raise KafkaError(
                        ErrorCode.invalid_replica_assignment,
                        f"Increasing the number of partitions by {t.count - topic.partitions} "
                        f"but {len(t.assignments)} assignments provided.",
                    )
                assignment = [tuple(a.broker_ids) for a in t.assignments]
                _check_assignments(broker, assignment, replication, topic.partitions)
            else:
                _check_replication(broker, replication)
            _check_openable(broker, t.count - topic.partitions)
            if not request.validate_only:
                _spend(quota, t.count - topic.partitions)
                with _placing(assignment):
                    await broker.add_partitions(t.name, t.count, assignment)
        except KafkaError as e:
            code, message = e.code, e.message
        results.append(
            ctx.response(
                "CreatePartitionsTopicResult", name=t.name, error_code=code, error_message=message
            )
        )
    return ctx.response(
        "CreatePartitionsResponse",
        throttle_time=_throttle_time(broker, quota),
        results=tuple(results),
    )
