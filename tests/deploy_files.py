"""deploy/'s files read as the tools that use them read them: fjord.env.example as systemd's
EnvironmentFile, the compose files as Docker Compose interpolates and merges them. No test
here runs Docker; these let tests check what a deployment would be given."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"

# Compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR:?error}, and $$ for a dollar sign.
_VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?::([-?])([^}]*))?\}")


def environment_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines, as systemd's EnvironmentFile and Compose's env_file read them."""
    variables = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            variables[key.strip()] = value.strip().strip('"')
    return variables


def interpolate(text: str, variables: Mapping[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name, kind, argument = match.groups()
        if name is None:
            return "$"
        given = variables.get(name, "")
        if kind == "?" and not given:
            raise KeyError(f"{name}: {argument}")
        return given or (argument if kind == "-" else "")

    return _VARIABLE.sub(value, text)


def compose(*names: str, variables: Mapping[str, str]) -> dict[str, Any]:
    """`docker compose -f deploy/<name> ...` as one project: each file interpolated, then merged
    as Compose merges them (mappings key by key, ports and volumes added, the rest replaced)."""
    merged: dict[str, Any] = {}
    for name in names:
        merged = _merge(merged, yaml.safe_load(interpolate((DEPLOY / name).read_text(), variables)))
    return merged


def _merge(base: Any, override: Any, key: str = "") -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        return {k: _merge(base.get(k), v, k) if k in base else v for k, v in override.items()} | {
            k: v for k, v in base.items() if k not in override
        }
    if isinstance(base, list) and isinstance(override, list) and key in ("ports", "volumes"):
        return base + [item for item in override if item not in base]
    return override


def properties(text: str) -> dict[str, str]:
    """A server.properties text's key=value lines (a trailing backslash continues a line)."""
    result = {}
    for line in text.replace("\\\n", "").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            result[key.strip()] = value.strip()
    return result
