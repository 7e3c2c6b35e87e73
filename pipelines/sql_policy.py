"""What a pipeline's transformation may be: one query over the view `source`, judged on the
plan Spark's parser makes of it, before anything is analysed or run.

The rules are an allowlist, because Spark's SQL keeps growing ways to reach outside a query:

- Plan nodes: only those a SELECT makes (projections, filters, joins, unions, aggregates,
  windows, CTEs, ...). Every command (SET, CACHE, INSERT, CREATE, ADD JAR, DECLARE, ...) parses
  to a node of its own and is refused as such.
- Relations: `source`, or a CTE of the statement in scope. A table of the catalog, a file
  (`text.`/path``), a table-valued function (`read_files`, `range`, ...) or a name computed at
  analysis (`IDENTIFIER(...)`) is refused.
- Functions: Spark's built-in functions, less those that reach the JVM or the machine: Java
  reflection (`reflect`, `java_method`, `try_reflect`), the environment (the OS user), files
  and XML parsers (whose entity resolution can read files).

This module is plain Python over `PlanNode` trees; `pipelines.spark.plan` makes them from
Spark's parser."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field


class TransformationError(ValueError):
    """Why a statement is not a transformation that can run: the policy's reason, Spark's
    (it does not parse or analyse) or the sink's (its columns)."""


@dataclass(frozen=True)
class PlanNode:
    """A node of the parsed plan or of one of its expressions, by its Catalyst class name.

    `name` is the relation's, the function's or the column's multi-part name where the node has
    one, `options` a relation's option keys; `ctes` are the names a WITH defines (its
    `definitions` are their plans, `children` its body), `recursive` whether it is a WITH
    RECURSIVE."""

    kind: str  # "plan" or "expression"
    node: str
    name: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    ctes: tuple[str, ...] = ()
    definitions: tuple[PlanNode, ...] = ()
    children: tuple[PlanNode, ...] = field(default=())
    recursive: bool = False


# What the parser makes of a SELECT (Spark 4's pipe syntax included), and nothing else.
QUERY_NODES = frozenset(
    {
        "Aggregate",
        "Distinct",
        "Except",
        "Filter",
        "Generate",
        "GlobalLimit",
        "Intersect",
        "Join",
        "LateralJoin",
        "LocalLimit",
        "Offset",
        "OneRowRelation",
        "Pivot",
        "Project",
        "RepartitionByExpression",
        "Sample",
        "Sort",
        "SubqueryAlias",
        "Union",
        "UnresolvedHint",
        "UnresolvedInlineTable",
        "UnresolvedRelation",
        "UnresolvedWith",
        "Unpivot",
        "WithWindowDefinition",
    }
)

# Unresolved expressions are resolved by the analyser from the session; these resolve only to
# columns, aliases, lambda variables or the functions checked by name.
UNRESOLVED_EXPRESSIONS = frozenset(
    {
        "UnresolvedAlias",
        "UnresolvedAttribute",
        "UnresolvedExtractValue",
        "UnresolvedFunction",
        "UnresolvedGenerator",
        "UnresolvedNamedLambdaVariable",
        "UnresolvedOrdinal",
        "UnresolvedRegex",
        "UnresolvedStar",
        "UnresolvedStarExceptOrReplace",
        "UnresolvedWindowExpression",
    }
)
FUNCTION_NODES = frozenset({"UnresolvedFunction", "UnresolvedGenerator"})
# Plan nodes whose expressions Spark evaluates during analysis.
LIMITS = frozenset({"GlobalLimit", "LocalLimit", "Offset"})

# Built-in functions that reach outside the query.
REFUSED_FUNCTIONS = {
    "reflect": "calls Java methods",
    "java_method": "calls Java methods",
    "try_reflect": "calls Java methods",
    "current_user": "reads the environment",
    "session_user": "reads the environment",
    "user": "reads the environment",
    "input_file_name": "reads file metadata",
    "input_file_block_start": "reads file metadata",
    "input_file_block_length": "reads file metadata",
    "from_protobuf": "reads a descriptor file",
    "to_protobuf": "reads a descriptor file",
    "from_avro": "reads a schema from a URL (avroSchemaUrl)",
    "to_avro": "reads a schema from a URL (avroSchemaUrl)",
    "schema_of_avro": "reads a schema from a URL (avroSchemaUrl)",
    "from_xml": "parses XML, whose entities can name files",
    "schema_of_xml": "parses XML, whose entities can name files",
    "xpath": "parses XML, whose entities can name files",
    "xpath_boolean": "parses XML, whose entities can name files",
    "xpath_double": "parses XML, whose entities can name files",
    "xpath_float": "parses XML, whose entities can name files",
    "xpath_int": "parses XML, whose entities can name files",
    "xpath_long": "parses XML, whose entities can name files",
    "xpath_number": "parses XML, whose entities can name files",
    "xpath_short": "parses XML, whose entities can name files",
    "xpath_string": "parses XML, whose entities can name files",
}
# Spark 4 names its built-ins also as `builtin.f` and `system.builtin.f`.
BUILTIN_QUALIFIERS = ((), ("builtin",), ("system", "builtin"))


def check_plan(plan: PlanNode, builtins: Collection[str]) -> None:
    """Raise TransformationError naming the first thing the statement may not do."""
    if plan.kind != "plan":
        raise TransformationError("a transformation is a query")
    _check(plan, frozenset(), frozenset(f.lower() for f in builtins))


def _check(node: PlanNode, ctes: frozenset[str], builtins: frozenset[str]) -> None:
    if node.kind == "plan":
        _check_plan_node(node, ctes)
    else:
        _check_expression(node, builtins)
    if node.node == "UnresolvedWith":
        # A definition sees the ones before it, and itself only in a WITH RECURSIVE: otherwise
        # its own name inside it is a relation of the catalog. The body sees them all.
        for i, definition in enumerate(node.definitions):
            seen = node.ctes[: i + 1] if node.recursive else node.ctes[:i]
            _check(definition, ctes | {n.lower() for n in seen}, builtins)
        ctes = ctes | {n.lower() for n in node.ctes}
    for child in node.children:
        _check(child, ctes, builtins)


def _check_plan_node(node: PlanNode, ctes: frozenset[str]) -> None:
    if node.node not in QUERY_NODES:
        raise TransformationError(f"only a query over `source` is allowed, not {_what(node.node)}")
    if node.node in LIMITS and any(
        child.kind == "expression" and child.node != "Literal" for child in node.children
    ):
        # Spark evaluates these while it analyses the statement: only a number is taken.
        raise TransformationError(f"{_what(node.node)} takes a number, not an expression")
    if node.node == "UnresolvedRelation":
        parts = [p.lower() for p in node.name]
        if len(parts) != 1 or (parts[0] != "source" and parts[0] not in ctes):
            raise TransformationError(
                f"reads `{'.'.join(node.name)}`: a transformation reads only `source`"
            )
        if node.options:
            raise TransformationError(f"`source` takes no options: {', '.join(node.options)}")


def _check_expression(node: PlanNode, builtins: frozenset[str]) -> None:
    if node.node.startswith("Unresolved") and node.node not in UNRESOLVED_EXPRESSIONS:
        raise TransformationError(f"{_what(node.node)} is not allowed in a transformation")
    if node.node == "ExpressionWithUnresolvedIdentifier":
        raise TransformationError("IDENTIFIER(...) is not allowed in a transformation")
    if node.node == "UnresolvedGenerator" and len(node.name) > 1:
        # After LATERAL VIEW a qualified name is a function stored in the catalog, not Spark's.
        raise TransformationError(f"function `{'.'.join(node.name)}`: name a built-in unqualified")
    if node.node in FUNCTION_NODES:
        _check_function(node.name, builtins)
    elif node.node == "UnresolvedAttribute" and len(node.name) == 1:
        # `current_user` and `user` without parentheses are functions where no column has the name.
        reason = REFUSED_FUNCTIONS.get(node.name[0].lower())
        if reason is not None:
            raise TransformationError(
                f"`{node.name[0]}` {reason}: not allowed in a transformation (as a column, rename it)"
            )


def _check_function(name: tuple[str, ...], builtins: frozenset[str]) -> None:
    parts = tuple(p.lower() for p in name)
    shown = ".".join(name)
    if not parts or parts[:-1] not in BUILTIN_QUALIFIERS or parts[-1] not in builtins:
        raise TransformationError(f"function `{shown}` is not one of Spark's built-in functions")
    reason = REFUSED_FUNCTIONS.get(parts[-1])
    if reason is not None:
        raise TransformationError(f"function `{shown}` {reason}: not allowed in a transformation")


def _what(node: str) -> str:
    """A Catalyst class name as words: `CacheTableAsSelect` -> `cache table as select`."""
    return "".join(f" {c.lower()}" if c.isupper() else c for c in node).strip()
