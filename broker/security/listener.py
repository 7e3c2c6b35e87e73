"""What a listener's security protocol asks of its connections: TLS (an SSLContext and the
principal mapping for client certificates) and SASL (mechanisms and how to check them).
Built once per listener at start-up from the broker config; a bad setting stops the broker."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from broker.config import BrokerConfig, ConfigError
from broker.security.jaas import JaasConfigError, parse_jaas_config
from broker.security.plain import PLAIN_LOGIN_MODULE, PlainSaslServer, plain_users
from broker.security.sasl import SaslServerAuthenticator
from broker.security.scram import CredentialLookup, ScramMechanism, ScramSaslServer
from broker.security.tls import SslConfigError, SslPrincipalMapper, server_context


@dataclass(frozen=True)
class ListenerSecurity:
    name: str
    protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] | None = None

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def authenticator(self, scram_credentials: CredentialLookup) -> SaslServerAuthenticator:
        def new_server(mechanism: str):
            if mechanism == "PLAIN":
                return PlainSaslServer(self.plain_users or {})
            return ScramSaslServer(ScramMechanism.from_name(mechanism), scram_credentials)

        return SaslServerAuthenticator(list(self.sasl_mechanisms), new_server)


def listener_security(config: BrokerConfig, name: str) -> ListenerSecurity:
    protocol = config.listener_security_protocols()[name]
    ssl_context = mapper = None
    mechanisms: tuple[str, ...] = ()
    users = None
    try:
        if protocol in ("SSL", "SASL_SSL"):
            ssl_context = server_context(lambda prop: _ssl_setting(config, name, protocol, prop))
            mapper = SslPrincipalMapper(
                str(config.listener_value(name, "ssl.principal.mapping.rules"))
            )
        if protocol.startswith("SASL_"):
            mechanisms = tuple(config.listener_value(name, "sasl.enabled.mechanisms"))  # type: ignore[arg-type]
            if "PLAIN" in mechanisms:
                users = _plain_users(config, name)
    except (SslConfigError, JaasConfigError) as e:
        raise ConfigError(f"Listener {name}: {e}") from e
    return ListenerSecurity(name, protocol, ssl_context, mapper, mechanisms, users)


def _ssl_setting(config: BrokerConfig, listener: str, protocol: str, prop: str) -> object:
    # KIP-684: on SASL_SSL listeners client certificates are asked for only when
    # ssl.client.auth is set for that listener; the broker-wide value is for SSL listeners.
    if prop == "ssl.client.auth" and protocol == "SASL_SSL":
        return config.listener_value(listener, prop, prefixed_only=True) or "none"
    return config.listener_value(listener, prop)


def _plain_users(config: BrokerConfig, listener: str) -> dict[str, str]:
    text = config.listener_value(listener, "plain.sasl.jaas.config", prefixed_only=True)
    text = text or config["sasl.jaas.config"]
    if not text:
        raise ConfigError(
            f"Listener {listener} enables SASL/PLAIN but neither "
            f"listener.name.{listener.lower()}.plain.sasl.jaas.config nor sasl.jaas.config "
            f"configures {PLAIN_LOGIN_MODULE}"
        )
    module = parse_jaas_config(str(text))
    if module.class_name != PLAIN_LOGIN_MODULE:
        raise JaasConfigError(f"SASL/PLAIN needs {PLAIN_LOGIN_MODULE}, not {module.class_name}")
    return plain_users(module)
