"""A transformation as Spark's own parser reads it, turned into `pipelines.sql_policy`'s plain
trees, and checked there before Spark analyses it.

Parsing makes an unresolved plan and runs nothing; only a statement the policy allows reaches
the analyser (`checked_query`), which resolves it against the view `source`."""

from __future__ import annotations

import functools
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from pipelines.sql_policy import PlanNode, TransformationError, check_plan


def parsed_plan(spark: SparkSession, sql: str) -> PlanNode:
    """The statement's unresolved plan; TransformationError when it does not parse."""
    parser = spark._jsparkSession.sessionState().sqlParser()
    try:
        plan = parser.parsePlan(sql)
    except Exception as e:  # py4j's error, carrying Spark's ParseException
        raise TransformationError(first_line(_java_message(e))) from None
    return _PlanReader(spark).plan(plan)


def checked_query(spark: SparkSession, sql: str) -> DataFrame:
    """The transformation as a DataFrame over the session's view `source`: parsed, held to the
    policy, then analysed. Raises TransformationError."""
    # Spark replaces `${env:NAME}`, `${system:name}` and `${conf}` in a statement's text before
    # parsing it: a transformation's text is taken as written.
    spark.conf.set("spark.sql.variable.substitute", "false")
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
    """Turns a JVM plan into PlanNodes, through py4j."""

    def __init__(self, spark: SparkSession) -> None:
        catalyst = "org.apache.spark.sql.catalyst.expressions"
        self.plan_expression = spark._jvm.java.lang.Class.forName(f"{catalyst}.PlanExpression")

    def plan(self, node: Any) -> PlanNode:
        kind = _class_name(node)
        name: tuple[str, ...] = ()
        options: tuple[str, ...] = ()
        ctes: tuple[str, ...] = ()
        definitions: tuple[PlanNode, ...] = ()
        if kind == "UnresolvedRelation":
            name = tuple(_items(node.multipartIdentifier()))
            options = tuple(str(key) for key in _items(node.options().keySet()))
        elif kind == "UnresolvedWith":
            relations = [(pair._1(), pair._2()) for pair in _items(node.cteRelations())]
            ctes = tuple(str(alias) for alias, _ in relations)
            definitions = tuple(self.plan(plan) for _, plan in relations)
        children = [self.plan(child) for child in _items(node.children())]
        children += [self.expression(e) for e in _items(node.expressions())]
        return PlanNode("plan", kind, name, options, ctes, definitions, tuple(children))

    def expression(self, node: Any) -> PlanNode:
        kind = _class_name(node)
        name: tuple[str, ...] = ()
        if kind == "UnresolvedFunction":
            name = tuple(_items(node.nameParts()))
        elif kind == "UnresolvedAttribute":
            name = tuple(_items(node.nameParts()))
        elif kind == "UnresolvedGenerator":
            identifier = node.name()
            database = identifier.database()
            name = (*((database.get(),) if database.isDefined() else ()), identifier.funcName())
        children = [self.expression(child) for child in _items(node.children())]
        if self.plan_expression.isInstance(node):  # a subquery: its plan is not a child
            children.append(self.plan(node.plan()))
        return PlanNode("expression", kind, name, children=tuple(children))


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
