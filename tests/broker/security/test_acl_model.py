"""The ACL model: CreateAcls' validation of bindings and the filters of DescribeAcls and
DeleteAcls (pattern types LITERAL, PREFIXED, MATCH, ANY; null fields match anything)."""

from __future__ import annotations

import pytest

from broker.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    InvalidAclError,
    ResourcePattern,
)
from broker.security.operations import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    from_code,
)

Op, P, R, T = AclOperation, AclPermissionType, ResourceType, PatternType


def binding(
    rtype=R.TOPIC,
    name="orders",
    pattern=T.LITERAL,
    principal="User:alice",
    host="*",
    op=Op.READ,
    perm=P.ALLOW,
):
    return AclBinding(
        ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, perm)
    )


def acl_filter(
    rtype=R.ANY, name=None, pattern=T.ANY, principal=None, host=None, op=Op.ANY, perm=P.ANY
):
    return AclBindingFilter(rtype, name, pattern, principal, host, op, perm)


def test_valid_bindings_pass():
    binding().validate()
    binding(R.TRANSACTIONAL_ID, "txn-", T.PREFIXED, op=Op.WRITE).validate()
    binding(R.CLUSTER, CLUSTER_NAME, op=Op.ALTER, perm=P.DENY).validate()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"rtype": R.ANY}, "Invalid resourceType ANY"),
        ({"rtype": R.UNKNOWN}, "Invalid resourceType UNKNOWN"),
        ({"pattern": T.MATCH}, "Invalid patternType MATCH"),
        ({"pattern": T.ANY}, "Invalid patternType ANY"),
        ({"op": Op.ANY}, "Invalid operation ANY"),
        ({"op": Op.UNKNOWN}, "Invalid operation UNKNOWN"),
        ({"perm": P.ANY}, "Invalid permissionType ANY"),
        ({"name": ""}, "Invalid empty resource name specified."),
        ({"rtype": R.CLUSTER, "name": "other"}, "The only valid name for the CLUSTER resource"),
        ({"principal": "alice"}, "Could not parse principal from `alice`"),
    ],
)
def test_create_acls_refuses_what_kafka_refuses(bad, message):
    with pytest.raises(InvalidAclError, match=message.replace("(", r"\(")):
        binding(**bad).validate()


def test_unknown_wire_codes_become_unknown():
    assert from_code(PatternType, 9) is T.UNKNOWN
    assert from_code(AclOperation, 99) is Op.UNKNOWN
    with pytest.raises(InvalidAclError, match="Unknown patternFilter"):
        acl_filter(pattern=T.UNKNOWN).validate()
    with pytest.raises(InvalidAclError, match="Unknown entryFilter"):
        acl_filter(op=Op.UNKNOWN).validate()


def test_null_fields_and_any_match_everything():
    everything = acl_filter()
    assert everything.matches(binding())
    assert everything.matches(binding(R.GROUP, "g", T.PREFIXED, "User:bob", "10.0.0.1", Op.ALL))


def test_literal_and_prefixed_filters_match_names_exactly():
    prefixed = binding(name="ord", pattern=T.PREFIXED)
    assert acl_filter(name="ord", pattern=T.PREFIXED).matches(prefixed)
    assert not acl_filter(name="orders", pattern=T.PREFIXED).matches(prefixed)
    assert not acl_filter(name="ord", pattern=T.LITERAL).matches(prefixed)
    assert acl_filter(name="ord", pattern=T.ANY).matches(prefixed)
    assert not acl_filter(name="orders", pattern=T.ANY).matches(prefixed)


def test_match_filter_selects_what_applies_to_the_resource():
    match = acl_filter(R.TOPIC, "orders", T.MATCH)
    assert match.matches(binding(name="orders"))
    assert match.matches(binding(name="*"))
    assert match.matches(binding(name="ord", pattern=T.PREFIXED))
    assert match.matches(binding(name="orders", pattern=T.PREFIXED))
    assert not match.matches(binding(name="orders-eu", pattern=T.PREFIXED))
    assert not match.matches(binding(name="ord"))
    assert not match.matches(binding(R.GROUP, "orders"))


def test_entry_filter_fields():
    b = binding(principal="User:alice", host="10.0.0.1", op=Op.WRITE, perm=P.DENY)
    assert acl_filter(principal="User:alice", host="10.0.0.1", op=Op.WRITE, perm=P.DENY).matches(b)
    assert not acl_filter(principal="User:*").matches(b)  # no wildcard expansion in filters
    assert not acl_filter(op=Op.READ).matches(b)
    assert not acl_filter(perm=P.ALLOW).matches(b)
    assert not acl_filter(host="*").matches(b)
