"""StandardAuthorizer decisions: DENY wins, PREFIXED and wildcard patterns, wildcard principal
and host, implied operations, super users, allow.everyone.if.no.acl.found, and
authorize_by_resource_type (idempotent producers)."""

from __future__ import annotations

from test_acl_model import binding

from broker.security.acl import CLUSTER_NAME
from broker.security.authorizer import StandardAuthorizer, parse_super_users
from broker.security.operations import AclOperation, AclPermissionType, PatternType, ResourceType

Op, P, R, T = AclOperation, AclPermissionType, ResourceType, PatternType
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def allowed(authorizer, op, name="orders", rtype=R.TOPIC, principal=ALICE, host=HOST) -> bool:
    return authorizer.authorize(principal, host, op, rtype, name)


def test_nothing_is_allowed_without_acls():
    assert not allowed(StandardAuthorizer(), Op.READ)


def test_allow_everyone_if_no_acl_found_applies_only_to_resources_without_acls():
    authorizer = StandardAuthorizer(allow_everyone_if_no_acl_found=True)
    assert allowed(authorizer, Op.WRITE)
    authorizer.add([binding(principal=BOB)])
    assert not allowed(authorizer, Op.WRITE)  # an ACL exists for the topic, just not for alice
    assert allowed(authorizer, Op.WRITE, name="payments")


def test_deny_beats_allow():
    authorizer = StandardAuthorizer(acls=[binding(op=Op.ALL), binding(op=Op.READ, perm=P.DENY)])
    assert not allowed(authorizer, Op.READ)
    assert allowed(authorizer, Op.WRITE)


def test_a_deny_on_a_wider_pattern_still_wins():
    authorizer = StandardAuthorizer(
        acls=[binding(op=Op.READ), binding(name="ord", pattern=T.PREFIXED, perm=P.DENY)]
    )
    assert not allowed(authorizer, Op.READ)


def test_prefixed_patterns_grant_a_family_of_names():
    authorizer = StandardAuthorizer(
        acls=[binding(R.TRANSACTIONAL_ID, "app-", T.PREFIXED, op=Op.WRITE)]
    )
    for name in ("app-", "app-1", "app-payments-7"):
        assert allowed(authorizer, Op.WRITE, name, R.TRANSACTIONAL_ID)
    for name in ("app", "other-app-1", "ap"):
        assert not allowed(authorizer, Op.WRITE, name, R.TRANSACTIONAL_ID)
    assert not allowed(authorizer, Op.WRITE, "app-1", R.TOPIC)


def test_wildcards():
    authorizer = StandardAuthorizer(
        acls=[binding(name="*", principal="User:*", op=Op.READ), binding(host=HOST, op=Op.WRITE)]
    )
    assert allowed(authorizer, Op.READ, "anything", principal=BOB, host="10.9.9.9")
    assert allowed(authorizer, Op.WRITE)
    assert not allowed(authorizer, Op.WRITE, host="10.0.0.2")
    # A PREFIXED "*" is a prefix like any other, not a wildcard.
    prefixed_star = StandardAuthorizer(acls=[binding(name="*", pattern=T.PREFIXED)])
    assert not allowed(prefixed_star, Op.READ)
    assert allowed(prefixed_star, Op.READ, "*x")


def test_implied_operations():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed(StandardAuthorizer(acls=[binding(op=op)]), Op.DESCRIBE)
    assert not allowed(StandardAuthorizer(acls=[binding(op=Op.CREATE)]), Op.DESCRIBE)
    assert allowed(StandardAuthorizer(acls=[binding(op=Op.ALTER_CONFIGS)]), Op.DESCRIBE_CONFIGS)
    assert not allowed(StandardAuthorizer(acls=[binding(op=Op.DESCRIBE_CONFIGS)]), Op.ALTER_CONFIGS)
    everything = StandardAuthorizer(acls=[binding(op=Op.ALL)])
    assert all(allowed(everything, op) for op in (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE))


def test_only_allow_acls_imply():
    authorizer = StandardAuthorizer(acls=[binding(op=Op.ALL), binding(op=Op.READ, perm=P.DENY)])
    assert allowed(authorizer, Op.DESCRIBE)  # a DENY of READ does not deny DESCRIBE
    denied_all = StandardAuthorizer(acls=[binding(op=Op.ALL), binding(op=Op.ALL, perm=P.DENY)])
    assert not allowed(denied_all, Op.DESCRIBE)


def test_super_users_bypass_acls():
    authorizer = StandardAuthorizer(
        super_users=parse_super_users("User:admin; User:ops"),
        acls=[binding(principal="User:*", op=Op.ALL, perm=P.DENY)],
    )
    assert allowed(authorizer, Op.ALTER, principal="User:admin")
    assert allowed(authorizer, Op.CLUSTER_ACTION, CLUSTER_NAME, R.CLUSTER, principal="User:ops")
    assert not allowed(authorizer, Op.READ)


def test_removing_acls():
    grant = binding(name="ord", pattern=T.PREFIXED)
    authorizer = StandardAuthorizer(acls=[grant, binding()])
    authorizer.remove([grant])
    assert allowed(authorizer, Op.READ)
    assert not allowed(authorizer, Op.READ, "ordinal")
    authorizer.remove([binding()])
    assert not allowed(authorizer, Op.READ)


def test_adding_a_binding_twice_keeps_one():
    authorizer = StandardAuthorizer(acls=[binding(), binding()])
    authorizer.remove([binding()])
    assert not allowed(authorizer, Op.READ)


def test_authorize_by_resource_type():
    def by_type(acls, **kw):
        authorizer = StandardAuthorizer(acls=acls, **kw)
        return authorizer.authorize_by_resource_type(ALICE, HOST, Op.WRITE, R.TOPIC)

    assert not by_type([])
    assert by_type([], allow_everyone_if_no_acl_found=True)
    assert by_type([binding(op=Op.WRITE)])
    assert by_type([binding(name="o", pattern=T.PREFIXED, op=Op.ALL)])
    assert not by_type([binding(op=Op.READ)])
    assert not by_type([binding(op=Op.WRITE), binding(op=Op.WRITE, perm=P.DENY)])
    assert not by_type(
        [binding(op=Op.WRITE), binding(name="or", pattern=T.PREFIXED, perm=P.DENY, op=Op.ALL)]
    )
    assert not by_type([binding(op=Op.WRITE), binding(name="*", perm=P.DENY, op=Op.WRITE)])
    assert by_type([binding(op=Op.WRITE), binding(name="payments", perm=P.DENY, op=Op.WRITE)])
    assert by_type([binding(op=Op.WRITE, principal=BOB)], super_users={ALICE})


def test_thousands_of_acls():
    acls = [binding(name=f"topic-{i}", principal=f"User:u{i}") for i in range(5000)]
    acls += [
        binding(name=f"pre-{i}-", pattern=T.PREFIXED, principal=f"User:u{i}") for i in range(5000)
    ]
    authorizer = StandardAuthorizer(acls=acls)
    assert allowed(authorizer, Op.READ, "topic-4321", principal="User:u4321")
    assert not allowed(authorizer, Op.READ, "topic-4321", principal="User:u1")
    assert allowed(authorizer, Op.READ, "pre-17-x", principal="User:u17")
    assert not allowed(authorizer, Op.READ, "pre-17-x", principal="User:u18")
