"""Masking credentials inside free text: error messages, logs, rendered configs.

Kafka hides PASSWORD-type configs by their type; text has no types, so this module finds the
shapes a credential takes in the text Fjord prints: the password of a URL's userinfo
(``postgres://fjord:s3cret@db/x``), ``key=value`` / ``key: value`` pairs whose key names a
secret (``password=``, libpq conninfo, JAAS options, ``client_secret``, ``*.token``, JSON and
Python reprs), and the whole value of ``sasl.jaas.config``. The user name, the host and the
key stay, so a masked message still says which account and which server it is about.

Pure: no Django, no broker imports, so the control plane and the pipelines use it too.
"""

import logging
import re

__all__ = ["MASK", "RedactingFormatter", "has_credentials", "redact"]

MASK = "****"

# A quoted value runs to its closing quote (backslash escapes as in JAAS, libpq and JSON); an
# unquoted one ends where the surrounding syntax (conninfo, query string, JSON, a sentence)
# would end it.
_QUOTED = r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'"""
_UNQUOTED = r"""["']?[^\s"'&;,)}\]]+"""

# The whole JAAS entry is the credential (Kafka's sasl.jaas.config is a PASSWORD config);
# unquoted, it ends with the entry's ';' or the line.
_JAAS_CONFIG = re.compile(
    rf"""(?<![\w.-])((?:[\w.-]*\.)?sasl\.jaas\.config["']?[ \t]*[=:][ \t]*)({_QUOTED}|[^;\n]+;?)""",
    re.IGNORECASE,
)

# Keys ending with a word naming a secret: ssl.keystore.password, PGPASSWORD, client_secret,
# DJANGO_SECRET_KEY, clientSecret, api-key, delegation.token.master.key.
_SECRET_KEY = (
    r"(?:password|passwd|pwd|secret(?:[_.-]?key)?|token|(?:api|access|private|master|keystore)"
    r"[_.-]?key)"
)
_KEY_VALUE = re.compile(
    rf"""(?<![\w.-])([\w.-]*?{_SECRET_KEY}["']?[ \t]*[=:][ \t]*)({_QUOTED}|{_UNQUOTED})""",
    re.IGNORECASE,
)

# Kafka's PLAIN login module on a broker lists its users' passwords as user_<name>="<password>".
_JAAS_USER_PASSWORD = re.compile(r"""(?<![\w.-])(user_[\w.-]+[ \t]*=[ \t]*)("(?:[^"\\]|\\.)*")""")

# RFC 3986 userinfo ``user:password@`` ends at the authority's last '@' (as urllib and libpq
# split it); the authority itself ends at '/', '?', '#' or whitespace.
_URL_PASSWORD = re.compile(
    r"""(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#:@"'<>\\]*:)([^\s/?#"<>\\]+)(@)"""
)


def _mask_value(match: re.Match) -> str:
    value = match.group(2)
    if value in ('""', "''"):  # an empty password hides nothing
        return match.group(0)
    quote = value[0] if value[0] in "\"'" and len(value) > 1 and value[-1] == value[0] else ""
    return f"{match.group(1)}{quote}{MASK}{quote}"


def redact(text: str) -> str:
    """``text`` with every credential found in it replaced by ``****``.

    Only the secret is replaced: the key, the quotes around the value, a URL's scheme, user,
    host and path stay. Text holding no credential comes back unchanged.
    """
    text = _JAAS_CONFIG.sub(_mask_value, text)
    text = _KEY_VALUE.sub(_mask_value, text)
    text = _JAAS_USER_PASSWORD.sub(_mask_value, text)
    return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}{m.group(3)}", text)


def has_credentials(text: str) -> bool:
    """Whether ``text`` holds something :func:`redact` would mask (a URL with a password, a
    ``password=`` pair, a JAAS entry, ...)."""
    return redact(text) != text


class RedactingFormatter(logging.Formatter):
    """A log formatter that masks credentials in the whole formatted record: the message, its
    arguments (an exception naming a URL) and the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
