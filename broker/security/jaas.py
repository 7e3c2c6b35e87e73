"""The JAAS configuration text of `sasl.jaas.config` (Kafka's JaasConfig): one login module
with a control flag and options, e.g.

    org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")

# Words as Java's StreamTokenizer reads them in JaasConfig, double-quoted strings (with
# backslash escapes), and the '=' and ';' delimiters.
_TOKEN = re.compile(r'\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<word>[^\s=;"]+)|(?P<delim>[=;]))')


class JaasConfigError(ValueError):
    pass


@dataclass(frozen=True)
class LoginModule:
    class_name: str
    control_flag: str
    options: dict[str, str]


def parse_jaas_config(text: str) -> LoginModule:
    """The single login module `text` configures; Kafka refuses zero or several too."""
    tokens = _tokenize(text)
    modules = []
    while tokens:
        modules.append(_login_module(tokens))
    if len(modules) != 1:
        raise JaasConfigError(
            f"JAAS config property contains {len(modules)} login modules, should be 1 module"
        )
    return modules[0]


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos, text = [], 0, text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            # Only the position: the text may hold passwords, and errors reach the logs.
            raise JaasConfigError(f"Unexpected character in JAAS config at position {pos}")
        if m["quoted"] is not None:
            tokens.append(("value", re.sub(r"\\(.)", r"\1", m["quoted"])))
        elif m["word"] is not None:
            tokens.append(("word", m["word"]))
        else:
            tokens.append(("delim", m["delim"]))
        pos = m.end()
    tokens.reverse()  # popped from the end
    return tokens


def _login_module(tokens: list[tuple[str, str]]) -> LoginModule:
    class_name = _expect(tokens, "word", "login module class name")
    flag = _expect(tokens, "word", "control flag").lower()
    if flag not in CONTROL_FLAGS:
        raise JaasConfigError(f"Invalid control flag {flag!r} for {class_name}")
    options: dict[str, str] = {}
    while True:
        if not tokens:
            raise JaasConfigError(f"Login module {class_name} is not terminated by ';'")
        if tokens[-1] == ("delim", ";"):
            tokens.pop()
            return LoginModule(class_name, flag, options)
        key = _expect(tokens, "word", "option name")
        if len(tokens) < 2 or tokens[-1] != ("delim", "=") or tokens[-2][0] == "delim":
            raise JaasConfigError(f"Option {key} of {class_name} has no value")
        tokens.pop()
        options[key] = tokens.pop()[1]


def _expect(tokens: list[tuple[str, str]], kind: str, what: str) -> str:
    if not tokens or tokens[-1][0] != kind:
        raise JaasConfigError(f"Expected a {what} in JAAS config")
    return tokens.pop()[1]
