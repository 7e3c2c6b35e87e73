"""Each pipeline's own Kafka principal: a SCRAM user the control plane creates, keeps in step
with the definition and removes with the pipeline, with ACLs for exactly what the pipeline
does (least privilege), so that its process never holds the control plane's credentials.

The user is named after the pipeline's transactional-id prefix, `fjord-pipeline-<id>`; its
password is random, kept in the pipeline's row (never answered by the API) and given to the
pipeline's process only. Its ACLs, all ALLOW from any host:

- TOPIC LITERAL <each source topic>: READ, DESCRIBE. A pattern source gets TOPIC PREFIXED on
  the pattern's literal prefix (Kafka's ACLs are literal or prefixed, not regular
  expressions; the fjord source reads only the topics the pattern matches among those). The
  fjord source reads assigned partitions, with no consumer group: no GROUP ACL.
- TOPIC LITERAL <sink topic>: WRITE, DESCRIBE.
- TOPIC LITERAL _fjord_sink_<prefix>, the exactly-once sink's decisions: CREATE (the sink
  makes it on first use), READ, WRITE, DESCRIBE.
- TRANSACTIONAL_ID PREFIXED <prefix>-: WRITE, DESCRIBE, TWO_PHASE_COMMIT (KIP-939: the sink's
  tasks prepare, its driver commits). The trailing '-' keeps pipeline 1 out of pipeline 12's.

On a broker that authenticates nobody (PLAINTEXT, the embedded development default) there is
no principal to make: pipelines connect unauthenticated, as the control plane does."""

from __future__ import annotations

from django.conf import settings

from api import kafka
from broker.client import KafkaAdminError
from broker.client.models import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from pipelines.models import Pipeline

Op = AclOperation


def authenticated() -> bool:
    """Whether pipelines get a principal: the broker authenticates over SASL. (A TLS client
    certificate is an identity the control plane cannot mint: over SSL a pipeline connects
    without one.)"""
    return settings.FJORD_SECURITY_PROTOCOL.startswith("SASL")


def user(pipeline: Pipeline) -> str:
    return pipeline.transactional_id_prefix


def principal(pipeline: Pipeline) -> str:
    return f"User:{user(pipeline)}"


def mechanism() -> str:
    """SCRAM-SHA-512, or SCRAM-SHA-256 where the control plane itself uses it (a listener may
    enable only that one)."""
    own = settings.FJORD_SASL_MECHANISM.upper()
    return own if own == "SCRAM-SHA-256" else "SCRAM-SHA-512"


# Java regex metacharacters: a literal prefix ends at the first one.
_META = set("\\^$.|?*+()[]{}")


def literal_prefix(pattern: str) -> str:
    """The text every topic the pattern matches (whole, as subscribePattern) starts with: its
    leading literal characters, less one a quantifier may drop; '' for a top-level
    alternation, a leading group or class, or an escape that is not a plain character."""
    if _top_level_alternation(pattern):
        return ""
    prefix, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern) and not pattern[i + 1].isalnum():
            prefix.append(pattern[i + 1])
            i += 2
        elif char in _META:
            break
        else:
            prefix.append(char)
            i += 1
    if prefix and pattern[i : i + 1] in ("?", "*", "{"):
        prefix.pop()  # `ab?`: the b is optional
    return "".join(prefix)


def _top_level_alternation(pattern: str) -> bool:
    depth, in_class, i = 0, False, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            return True
        i += 1
    return False


def bindings(pipeline: Pipeline) -> set[AclBinding]:
    """The ACLs the pipeline's principal needs, and no more."""
    from pipelines.spark.sink import DECISIONS_PREFIX  # Spark's modules, only when needed

    prefix = pipeline.transactional_id_prefix
    grants: list[tuple[ResourceType, str, PatternType, tuple[AclOperation, ...]]] = []
    if pipeline.source_pattern:
        source = literal_prefix(pipeline.source_pattern)
        grants.append((ResourceType.TOPIC, source, PatternType.PREFIXED, (Op.READ, Op.DESCRIBE)))
    for topic in pipeline.source_topics:
        grants.append((ResourceType.TOPIC, topic, PatternType.LITERAL, (Op.READ, Op.DESCRIBE)))
    grants += [
        (ResourceType.TOPIC, pipeline.sink_topic, PatternType.LITERAL, (Op.WRITE, Op.DESCRIBE)),
        (
            ResourceType.TOPIC,
            f"{DECISIONS_PREFIX}{prefix}",
            PatternType.LITERAL,
            (Op.CREATE, Op.READ, Op.WRITE, Op.DESCRIBE),
        ),
        (
            ResourceType.TRANSACTIONAL_ID,
            f"{prefix}-",
            PatternType.PREFIXED,
            (Op.WRITE, Op.DESCRIBE, Op.TWO_PHASE_COMMIT),
        ),
    ]
    return {
        AclBinding(
            kind, name, pattern, principal(pipeline), "*", operation, AclPermissionType.ALLOW
        )
        for kind, name, pattern, operations in grants
        for operation in operations
    }


def _exactly(binding: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(
        binding.resource_type,
        binding.resource_name,
        binding.pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )


def _authorizer_off(e: KafkaAdminError) -> bool:
    # Without an authorizer every principal may do everything: there are no ACLs to keep.
    return e.name == "SECURITY_DISABLED"


def sync(pipeline: Pipeline) -> None:
    """Create or update the pipeline's user and make its ACLs exactly `bindings(pipeline)`.
    Raises KafkaAdminError or BrokerUnavailable."""
    if not authenticated():
        return
    wanted = bindings(pipeline)

    async def apply(admin) -> None:
        await admin.upsert_user_scram_credential(
            user(pipeline), pipeline.kafka_password, mechanism()
        )
        try:
            held = set(await admin.describe_acls(AclBindingFilter(principal=principal(pipeline))))
        except KafkaAdminError as e:
            if _authorizer_off(e):
                return
            raise
        if stale := held - wanted:
            await admin.delete_acls([_exactly(b) for b in sorted(stale, key=str)])
        if missing := wanted - held:
            await admin.create_acls(sorted(missing, key=str))

    kafka.call(apply)


def remove(pipeline: Pipeline) -> None:
    """Delete the pipeline's ACLs and its user's credentials (none left is no error)."""
    if not authenticated():
        return

    async def apply(admin) -> None:
        try:
            await admin.delete_acls([AclBindingFilter(principal=principal(pipeline))])
        except KafkaAdminError as e:
            if not _authorizer_off(e):
                raise
        try:
            held = await admin.describe_user_scram_credentials([user(pipeline)])
        except KafkaAdminError as e:
            if e.name != "RESOURCE_NOT_FOUND":
                raise
            return
        for info in held.get(user(pipeline), []):
            await admin.delete_user_scram_credential(user(pipeline), info.mechanism)

    kafka.call(apply)


def acls(pipeline: Pipeline) -> list[AclBinding]:
    """The ACLs the broker holds for the pipeline's principal, as the console shows them;
    raises KafkaAdminError (SECURITY_DISABLED without an authorizer) or BrokerUnavailable."""
    found = kafka.call(
        lambda admin: admin.describe_acls(AclBindingFilter(principal=principal(pipeline)))
    )
    return sorted(found, key=lambda b: (b.resource_type, b.resource_name, b.operation))


def jaas_config(pipeline: Pipeline) -> str:
    """The `kafka.sasl.jaas.config` of the pipeline's own user. Neither the name nor the
    password (URL-safe base64) holds a quote or a backslash to escape."""
    return f'username="{user(pipeline)}" password="{pipeline.kafka_password}";'
