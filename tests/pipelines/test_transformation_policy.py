"""Pipelines' transformations through the control plane's checker (`python -m
pipelines.sql_checker`, Spark's parser and analyser in a process of its own): one query over
`source`, refused with the reason when it is anything else, and never run."""

from __future__ import annotations

import os
import signal

import pytest

from pipelines import sql
from pipelines.sql import TransformationError, check_transformation

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize(
    "statement, columns",
    [
        ("SELECT key, value FROM source", ["key", "value"]),
        (
            "SELECT upper(CAST(value AS STRING)) AS value FROM source WHERE key IS NOT NULL",
            ["value"],
        ),
        (
            "WITH up AS (SELECT key, upper(CAST(value AS STRING)) AS v FROM source) "
            "SELECT key, v AS value FROM up",
            ["key", "value"],
        ),
        (
            "WITH a AS (SELECT key, value FROM source), b AS (SELECT key FROM a) "
            "SELECT a.key, a.value FROM a JOIN b ON a.key = b.key",
            ["key", "value"],
        ),
        (
            "SELECT l.key, r.value FROM source l JOIN source r ON l.key = r.key",
            ["key", "value"],
        ),
        (
            "SELECT key, value FROM source UNION ALL SELECT key, value FROM source",
            ["key", "value"],
        ),
        (
            "SELECT key, value FROM source WHERE value IN (SELECT value FROM source) "
            "AND EXISTS (SELECT 1 FROM source) AND offset > (SELECT min(offset) FROM source)",
            ["key", "value"],
        ),
        (
            "SELECT key, CAST(count(*) AS STRING) AS value FROM source GROUP BY key",
            ["key", "value"],
        ),
        (
            "SELECT key, value, row_number() OVER (PARTITION BY key ORDER BY offset) AS n "
            "FROM source",
            ["key", "value", "n"],
        ),
        (
            "SELECT key, v AS value FROM source LATERAL VIEW explode(array(value)) t AS v",
            ["key", "value"],
        ),
        (
            "SELECT key, to_json(transform(array(1, 2), x -> x + partition)) AS value FROM source",
            ["key", "value"],
        ),
        ("FROM source SELECT key, value ORDER BY key LIMIT 10", ["key", "value"]),
        ("SELECT /*+ BROADCAST(s) */ s.key, s.value FROM source s", ["key", "value"]),
        ("SELECT key, value FROM (SELECT key AS user, key, value FROM source)", ["key", "value"]),
        (
            "SELECT * EXCEPT (topic, partition, offset, timestamp, timestampType) FROM source",
            ["key", "value"],
        ),
        (
            "SELECT key, value, sum(offset) OVER w AS total FROM source "
            "WINDOW w AS (PARTITION BY key)",
            ["key", "value", "total"],
        ),
        # Text that Spark would substitute from the environment stays as written.
        ("SELECT key, '${env:HOME}' AS value FROM source", ["key", "value"]),
    ],
)
def test_queries_over_source_pass(statement, columns):
    assert check_transformation(statement) == columns


@pytest.mark.parametrize(
    "statement, reason",
    [
        # Java reflection, however the function is named.
        ("SELECT reflect('java.lang.System', 'getenv', 'HOME') AS value FROM source", "`reflect`"),
        (
            "SELECT raise_error(reflect('java.lang.System', 'getenv', 'HOME')) AS value "
            "FROM source",
            "`reflect`",
        ),
        ("SELECT java_method('java.lang.System', 'getenv') AS value FROM source", "`java_method`"),
        ("SELECT try_reflect('java.lang.System', 'lineSeparator') AS value", "`try_reflect`"),
        (
            "SELECT system.builtin.reflect('java.lang.System', 'getenv', 'HOME') AS value",
            "`system.builtin.reflect`",
        ),
        (
            "SELECT key, value FROM source WHERE value = (SELECT "
            "CAST(reflect('java.lang.System', 'getenv', 'HOME') AS BINARY) FROM source)",
            "`reflect`",
        ),
        (
            "WITH t AS (SELECT reflect('java.lang.System', 'getenv', 'HOME') AS value "
            "FROM source) SELECT value FROM t",
            "`reflect`",
        ),
        # Wherever the call hides: a WINDOW clause, a hint, a FILTER, VALUES, a LATERAL join.
        (
            "SELECT key, value, sum(offset) OVER w AS s FROM source "
            "WINDOW w AS (PARTITION BY reflect('java.lang.System', 'getenv', 'HOME'))",
            "`reflect`",
        ),
        (
            "SELECT /*+ REPARTITION(reflect('java.lang.System', 'getenv', 'HOME')) */ key, value "
            "FROM source",
            "`reflect`",
        ),
        (
            "SELECT key, max(value) FILTER (WHERE reflect('a', 'b') = 'x') AS value FROM source "
            "GROUP BY key",
            "`reflect`",
        ),
        (
            "SELECT key, value FROM source UNION ALL SELECT * FROM VALUES "
            "(CAST(reflect('java.lang.System', 'getenv', 'HOME') AS BINARY), X'00') t(key, value)",
            "`reflect`",
        ),
        (
            "SELECT s.key, t.v AS value FROM source s, "
            "LATERAL (SELECT value AS v FROM text.`/etc/hostname`) t",
            "reads `text./etc/hostname`",
        ),
        (
            "SELECT IDENTIFIER('reflect')('java.lang.System', 'getenv', 'HOME') AS value",
            "IDENTIFIER",
        ),
        # The environment and files.
        ("SELECT current_user() AS value FROM source", "`current_user` reads the environment"),
        ("SELECT user AS value FROM source", "`user` reads the environment"),
        ("SELECT from_xml(CAST(value AS STRING), 'a INT') AS value FROM source", "`from_xml`"),
        ("SELECT xpath_string(CAST(value AS STRING), '/a') AS value FROM source", "`xpath_string`"),
        # Relations other than `source`.
        ("SELECT value FROM text.`/etc/hostname`", "reads `text./etc/hostname`"),
        ("SELECT value FROM csv.`/etc`", "reads `csv./etc`"),
        ("SELECT key, value FROM default.source", "reads `default.source`"),
        ("SELECT key, value FROM some_table", "reads `some_table`"),
        (
            "WITH source AS (SELECT value FROM parquet.`/tmp`) SELECT value FROM source",
            "reads `parquet./tmp`",
        ),
        (
            "SELECT l.key, r.value FROM source l JOIN json.`/etc/passwd` r ON true",
            "reads `json./etc/passwd`",
        ),
        ("SELECT key, value FROM source WITH ('path' = '/etc')", "takes no options: path"),
        ("SELECT * FROM read_files('/etc')", "table valued function"),
        ("SELECT id AS value FROM range(10)", "table valued function"),
        ("SELECT * FROM IDENTIFIER('te' || 'xt.`/etc`')", "unresolved identifier"),
        # A CTE's own name inside it is the catalog's relation, unless WITH RECURSIVE.
        (
            "WITH secret AS (SELECT key, value FROM secret) SELECT key, value FROM secret",
            "reads `secret`",
        ),
        (
            "SELECT key, x AS value FROM source LATERAL VIEW builtin.explode(array(value)) t AS x",
            "name a built-in unqualified",
        ),
        ("SELECT from_avro(value, '{}') AS value FROM source", "`from_avro`"),
        # What Spark evaluates while it analyses.
        (
            "SELECT key, value FROM source LIMIT CAST(regexp_like('aa', 'a+') AS INT)",
            "global limit takes a number",
        ),
        # Built to be costly.
        (
            "SELECT key, value FROM source WHERE partition > " + "+".join(["1"] * 600),
            "too large to check",
        ),
        ("SELECT key, value FROM source -- " + "x" * 20_000, "at most 20000 characters"),
        # Commands.
        ("SET spark.sql.ansi.enabled=false", "set command"),
        ("CACHE TABLE c AS SELECT key, value FROM source", "cache table"),
        ("CREATE TEMPORARY VIEW v USING text OPTIONS (path '/etc')", "only a query"),
        ("INSERT OVERWRITE DIRECTORY '/tmp/out' USING text SELECT 'x'", "insert into dir"),
        ("ADD JAR /tmp/evil.jar", "only a query"),
        ("DECLARE VARIABLE v STRING DEFAULT 'x'", "create variable"),
        ("DROP VIEW source", "only a query"),
        ("EXPLAIN SELECT key, value FROM source", "only a query"),
        # Not SQL at all, and two statements.
        ("SELEKT 1", "PARSE_SYNTAX_ERROR"),
        ("SELECT key, value FROM source; SET x=1", "PARSE_SYNTAX_ERROR"),
    ],
)
def test_anything_else_is_refused_with_its_reason(statement, reason):
    with pytest.raises(TransformationError) as refused:
        check_transformation(statement)
    assert reason in str(refused.value)


def test_a_refused_statement_runs_nothing(tmp_path):
    kept = tmp_path / "kept.txt"
    kept.write_text("here before")
    for statement in (
        f"INSERT OVERWRITE DIRECTORY '{tmp_path}' USING text SELECT 'gone'",
        f"SELECT key, value FROM source UNION ALL SELECT 'k', 'v' FROM text.`{kept}`",
    ):
        with pytest.raises(TransformationError):
            check_transformation(statement)
    assert [p.name for p in tmp_path.iterdir()] == ["kept.txt"]
    assert kept.read_text() == "here before"


def test_the_checker_holds_no_secret_and_is_replaced_when_it_dies_or_hangs(monkeypatch):
    """Its environment is only what Java and Python need, so even a way around the policy would
    find no secret there; a checker that died is started again, one that hangs is killed."""
    monkeypatch.setenv("DJANGO_SECRET_KEY", "not-for-the-checker")
    monkeypatch.setenv("DATABASE_URL", "postgres://fjord:not-for-the-checker@db/fjord")
    checker = sql.SqlChecker()
    try:
        assert checker.check("SELECT key, value FROM source", False) == ["key", "value"]
        first = checker.pid
        with open(f"/proc/{first}/environ", "rb") as environ:
            names = {entry.split(b"=", 1)[0] for entry in environ.read().split(b"\0") if entry}
        assert names and names <= {n.encode() for n in sql.CHECKER_ENVIRONMENT}

        os.kill(first, signal.SIGKILL)
        os.waitpid(first, 0)
        assert checker.check("SELECT value FROM source", False) == ["value"]
        second = checker.pid
        assert second != first

        os.kill(second, signal.SIGSTOP)
        monkeypatch.setattr(sql, "CHECK_TIMEOUT_S", 0.5)
        with pytest.raises(sql.CheckerUnavailable):
            checker.check("SELECT key, value FROM source", False)
        assert checker.pid is None
        with pytest.raises(ProcessLookupError):
            os.kill(second, 0)
    finally:
        checker.close()
