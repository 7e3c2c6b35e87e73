"""TLS for SSL and SASL_SSL listeners: the server SSLContext built from Kafka's PEM settings,
the client certificate's distinguished name in RFC 2253 form, and `ssl.principal.mapping.rules`
(Kafka's SslPrincipalMapper)."""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"

CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class SslConfigError(ValueError):
    pass


def server_context(setting: Callable[[str], object]) -> ssl.SSLContext:
    """A server context from the listener's `ssl.*` values (`setting(name)` resolves the
    `listener.name.<l>.` prefix). Only PEM stores: Python's ssl module reads no JKS/PKCS12."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_stores(ctx, setting, key_store_required=True)
    ctx.verify_mode = CLIENT_AUTH[str(setting("ssl.client.auth"))]
    return ctx


def client_context(setting: Callable[[str], object]) -> ssl.SSLContext:
    """The context a broker connects to another broker's listener with, from that listener's
    `ssl.*` values, as Kafka's inter-broker client uses them: the peer's certificate checked
    against the trust store (the system's when none is set) and its host name unless
    ssl.endpoint.identification.algorithm is empty; the key store, if any, presented to
    listeners asking for client certificates."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if not _load_stores(ctx, setting, key_store_required=False):
        ctx.load_default_certs()
    ctx.check_hostname = bool(setting("ssl.endpoint.identification.algorithm"))
    return ctx


def _load_stores(
    ctx: ssl.SSLContext, setting: Callable[[str], object], key_store_required: bool
) -> bool:
    """Load the key store and trust store into `ctx`; whether a trust store was set."""
    for store in ("ssl.keystore.type", "ssl.truststore.type"):
        if setting(store) != "PEM":
            raise SslConfigError(
                f"Invalid value {setting(store)} for configuration {store}: Fjord reads PEM only"
            )
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    location = setting("ssl.keystore.location")
    chain, key = setting("ssl.keystore.certificate.chain"), setting("ssl.keystore.key")
    password = setting("ssl.key.password")
    try:
        if location:
            if chain or key:
                raise SslConfigError(
                    "ssl.keystore.location and ssl.keystore.certificate.chain/key are exclusive"
                )
            ctx.load_cert_chain(location, password=password)
        elif chain and key:
            _load_pem_text(ctx, str(chain), str(key), password)
        elif key_store_required:
            raise SslConfigError(
                "An SSL listener needs ssl.keystore.location or both "
                "ssl.keystore.certificate.chain and ssl.keystore.key"
            )
        truststore, certificates = (
            setting("ssl.truststore.location"),
            setting("ssl.truststore.certificates"),
        )
        if truststore:
            ctx.load_verify_locations(cafile=truststore)
        if certificates:
            ctx.load_verify_locations(cadata=str(certificates))
    except (OSError, ssl.SSLError) as e:
        raise SslConfigError(f"Cannot load the SSL key store or trust store: {e}") from e
    return bool(truststore or certificates)


def _load_pem_text(ctx: ssl.SSLContext, chain: str, key: str, password) -> None:
    # The ssl module loads key material from files only; the file lives as long as the call.
    with tempfile.TemporaryDirectory(prefix="fjord-keystore-") as d:
        path = os.path.join(d, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key.strip() + "\n" + chain.strip() + "\n")
        ctx.load_cert_chain(path, password=password)


# Attribute keywords Java's X500Principal.getName() (RFC 2253) writes; others become an OID.
_RFC2253_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_OIDS = {
    "emailAddress": ("1.2.840.113549.1.9.1", 0x16),  # IA5String
    "serialNumber": ("2.5.4.5", 0x13),  # PrintableString
    "title": ("2.5.4.12", 0x0C),
    "surname": ("2.5.4.4", 0x0C),
    "givenName": ("2.5.4.42", 0x0C),
    "initials": ("2.5.4.43", 0x0C),
    "pseudonym": ("2.5.4.65", 0x0C),
    "generationQualifier": ("2.5.4.44", 0x0C),
    "dnQualifier": ("2.5.4.46", 0x13),
    "postalCode": ("2.5.4.17", 0x0C),
    "businessCategory": ("2.5.4.15", 0x0C),
}


def distinguished_name(subject: tuple) -> str:
    """The RFC 2253 string of a subject as `SSLSocket.getpeercert()` returns it: RDNs from
    the last to the first, multi-valued ones joined with '+'."""
    return ",".join("+".join(_attribute(k, v) for k, v in rdn) for rdn in reversed(subject))


def _attribute(name: str, value: str) -> str:
    keyword = _RFC2253_KEYWORDS.get(name)
    if keyword is not None:
        return f"{keyword}={_escape(value)}"
    oid, tag = _OIDS.get(name, (name, 0x0C))
    # Java writes attributes without a keyword as the hex of their DER encoding.
    return f"{oid}=#{_der(tag, value.encode()).hex()}"


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes([tag, n]) + content
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(size)]) + size + content


def _escape(value: str) -> str:
    escaped = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


def peer_principal(ssl_object, mapper: SslPrincipalMapper) -> str:
    """`User:` and the mapped DN of a verified client certificate; User:ANONYMOUS without one."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    if not cert or not cert.get("subject"):
        return ANONYMOUS
    return "User:" + mapper.name(distinguished_name(cert["subject"]))


class NoMatchingRule(ValueError):
    pass


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        result = self.pattern.sub(self.replacement, dn)
        return (
            result.lower() if self.case == "L" else result.upper() if self.case == "U" else result
        )


# DEFAULT or RULE:pattern/replacement/[LU]; a '/' inside the parts is written '\/', which
# both Java's and Python's regular expressions read as '/'.
_RULE = re.compile(r"DEFAULT|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)")
_SPLIT = re.compile(r"\s*(DEFAULT|RULE:(?:\\.|[^\\/])*/(?:\\.|[^\\/])*/[LU]?|[^,]*?)\s*(?:,\s*|$)")


class SslPrincipalMapper:
    """The first rule matching the whole DN names the principal; none matching fails the
    connection, as in Kafka."""

    def __init__(self, rules: str) -> None:
        self._rules = [_parse_rule(r) for r in _split_rules(rules)]

    def name(self, dn: str) -> str:
        for rule in self._rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {dn}, rules {self._rules}")


def _split_rules(text: str) -> list[str]:
    rules, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _SPLIT.match(text, pos)
        if m is None or m.end() == pos:
            raise SslConfigError(f"Invalid rule: {text[pos:]}")
        if m[1]:
            rules.append(m[1])
        pos = m.end()
    return rules or ["DEFAULT"]


def _parse_rule(text: str) -> _Rule:
    m = _RULE.fullmatch(text)
    if m is None:
        raise SslConfigError(f"Invalid rule: {text}")
    if text == "DEFAULT":
        return _Rule(None)
    pattern, replacement, case = m.groups()
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise SslConfigError(f"Invalid rule: {text}: {e}") from None
    return _Rule(compiled, _java_replacement(replacement), case)


def _java_replacement(java: str) -> str:
    """Java's replacement syntax ($1 a group, backslash quoting the next character) in
    Python's (\\g<1>, backslashes doubled)."""
    out, i = [], 0
    while i < len(java):
        m = re.match(r"\$(\d+)", java[i:])
        if m:
            out.append(rf"\g<{m[1]}>")
            i += m.end()
            continue
        if java[i] == "\\" and i + 1 < len(java):
            i += 1
        out.append("\\\\" if java[i] == "\\" else java[i])
        i += 1
    return "".join(out)
