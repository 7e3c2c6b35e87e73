"""A transformation as Spark's own parser reads it, turned into `pipelines.sql_policy`'s plain
trees, and checked there before Spark analyses it.

Parsing makes an unresolved plan and runs nothing; only a statement the policy allows reaches
the analyser (`checked_query`), which resolves it against the view `source`."""

from __future__ import annotations

import functools
from typing import Any

from py4j.java_gateway import JavaObject
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from pipelines.sql_policy import PlanNode, TransformationError, check_plan

# Bounds on what one check walks (each node costs a few py4j calls): a pipeline's query is far
# smaller, and a statement built to be costly is refused instead of holding the checker.
MAX_STATEMENT_CHARS = 20_000
MAX_NODES = 5_000
MAX_DEPTH = 200


def parsed_plan(spark: SparkSession, sql: str) -> PlanNode:
    """The statement's unresolved plan; TransformationError when it does not parse."""
    if len(sql) > MAX_STATEMENT_CHARS:
        raise TransformationError(f"a transformation is at most {MAX_STATEMENT_CHARS} characters")
    parser = spark._jsparkSession.sessionState().sqlParser()
    try:
        plan = parser.parsePlan(sql)
    except Exception as e:  # py4j's error, carrying Spark's ParseException
        raise TransformationError(first_line(_java_message(e))) from None
    try:
        return _PlanReader(spark).read(plan)
    except Py4JError as e:  # a node of a shape the reader does not know: not checked, refused
        raise TransformationError(
            f"the statement could not be checked: {first_line(str(e))}"
        ) from None


def checked_query(spark: SparkSession, sql: str) -> DataFrame:
    """The transformation as a DataFrame over the session's view `source`: parsed, held to the
    policy, then analysed. Raises TransformationError."""
    # Spark replaces `${env:NAME}`, `${system:name}` and `${conf}` in a statement's text before
    # parsing it: a transformation's text is taken as written.
    spark.conf.set("spark.sql.variable.substitute", "false")
    # Nor does its parser evaluate VALUES rows, which would run expressions before any check.
    spark.conf.set("spark.sql.parser.eagerEvalOfUnresolvedInlineTable", "false")
    check_plan(parsed_plan(spark, sql), builtin_functions(spark))
    try:
        return spark.sql(sql)
    except PySparkException as e:
        raise TransformationError(first_line(str(e))) from None


@functools.cache
def builtin_functions(spark: SparkSession) -> frozenset[str]:
    registry = spark._jvm.org.apache.spark.sql.catalyst.analysis.FunctionRegistry.builtin()
    return frozenset(str(f.funcName()) for f in _items(registry.listFunction()))


class _PlanReader:
    """Turns a JVM plan into PlanNodes, through py4j.

    A node's parts are found in all its fields, not only in its children and `expressions`:
    some nodes keep expressions or plans elsewhere (a WINDOW clause's definitions are a map, a
    subquery's plan is no child of its expression), and what the walk misses the policy cannot
    see."""

    def __init__(self, spark: SparkSession) -> None:
        def java_class(name: str) -> Any:
            return spark._jvm.java.lang.Class.forName(name)

        self.logical_plan = java_class("org.apache.spark.sql.catalyst.plans.logical.LogicalPlan")
        self.expression = java_class("org.apache.spark.sql.catalyst.expressions.Expression")
        self.option = java_class("scala.Option")
        self.iterable = java_class("scala.collection.Iterable")
        self.product = java_class("scala.Product")
        self.nodes = 0

    def read(self, node: Any, depth: int = 0) -> PlanNode:
        self.nodes += 1
        if self.nodes > MAX_NODES or depth > MAX_DEPTH:
            raise TransformationError(
                f"the statement is too large to check (at most {MAX_NODES} parts, "
                f"nested at most {MAX_DEPTH} deep)"
            )
        kind = _class_name(node)
        if self.logical_plan.isInstance(node):
            return self._plan(node, kind, depth)
        name: tuple[str, ...] = ()
        if kind in ("UnresolvedFunction", "UnresolvedAttribute"):
            name = tuple(_items(node.nameParts()))
        elif kind == "UnresolvedGenerator":
            identifier = node.name()
            database = identifier.database()
            name = (*((database.get(),) if database.isDefined() else ()), identifier.funcName())
        children = tuple(self.read(part, depth + 1) for part in self._parts(node))
        return PlanNode("expression", kind, name, children=children)

    def _plan(self, node: Any, kind: str, depth: int) -> PlanNode:
        if kind == "UnresolvedWith":
            # Its definitions apart from its body: each sees only the names before it.
            relations = [(pair._1(), pair._2()) for pair in _items(node.cteRelations())]
            return PlanNode(
                "plan",
                kind,
                ctes=tuple(str(alias) for alias, _ in relations),
                definitions=tuple(self.read(plan, depth + 1) for _, plan in relations),
                children=(self.read(node.child(), depth + 1),),
                recursive=bool(node.allowRecursion()),
            )
        name: tuple[str, ...] = ()
        options: tuple[str, ...] = ()
        if kind == "UnresolvedRelation":
            name = tuple(_items(node.multipartIdentifier()))
            options = tuple(str(key) for key in _items(node.options().keySet()))
        children = tuple(self.read(part, depth + 1) for part in self._parts(node))
        return PlanNode("plan", kind, name, options, children=children)

    def _parts(self, node: Any) -> list[Any]:
        """The plans and expressions in the node's fields, however nested in options,
        collections (maps too) and tuples."""
        parts: list[Any] = []
        pending = _items(node.productIterator())
        while pending:
            value = pending.pop()
            if not isinstance(value, JavaObject):
                continue  # a string, number or boolean
            if self.logical_plan.isInstance(value) or self.expression.isInstance(value):
                parts.append(value)
            elif self.option.isInstance(value):
                pending.extend(_items(value))
            elif self.iterable.isInstance(value):
                pending.extend(_items(value))
            elif self.product.isInstance(value):
                pending.extend(_items(value.productIterator()))
        return parts[::-1]


def _class_name(node: Any) -> str:
    return str(node.getClass().getSimpleName())


def _items(seq: Any) -> list[Any]:
    """A Scala collection's elements."""
    iterator = seq.iterator()
    out = []
    while iterator.hasNext():
        out.append(iterator.next())
    return out


def _java_message(error: Exception) -> str:
    java = getattr(error, "java_exception", None)
    return str(java.getMessage()) if java is not None else str(error)


def first_line(message: str) -> str:
    """Spark's message without the plan it appends."""
    return message.strip().split("\n")[0][:1000]
