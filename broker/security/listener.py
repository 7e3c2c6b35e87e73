"""What a listener's security protocol asks of its connections: TLS (an SSLContext and the
principal mapping for client certificates) and SASL (mechanisms and how to check them).
Built once per listener at start-up from the broker config; a bad setting stops the broker."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from broker.client.session import Security
from broker.config import BrokerConfig, ConfigError
from broker.security.jaas import JaasConfigError, LoginModule, parse_jaas_config
from broker.security.plain import PLAIN_LOGIN_MODULE, PlainSaslServer, plain_users
from broker.security.sasl import SaslServerAuthenticator
from broker.security.scram import CredentialLookup, ScramMechanism, ScramSaslServer
from broker.security.tls import (
    SslConfigError,
    SslPrincipalMapper,
    client_context,
    server_context,
)

SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


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
    return plain_users(_login_module(config, listener, "PLAIN", "enables SASL/PLAIN"))


def _login_module(config: BrokerConfig, listener: str, mechanism: str, why: str) -> LoginModule:
    """The listener's JAAS login module for `mechanism`: its own
    listener.name.<l>.<mechanism>.sasl.jaas.config, else the broker-wide sasl.jaas.config."""
    wanted = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
    prefixed = f"{mechanism.lower()}.sasl.jaas.config"
    text = config.listener_value(listener, prefixed, prefixed_only=True)
    text = text or config["sasl.jaas.config"]
    if not text:
        raise ConfigError(
            f"Listener {listener} {why} but neither listener.name.{listener.lower()}.{prefixed} "
            f"nor sasl.jaas.config configures {wanted}"
        )
    module = parse_jaas_config(str(text))
    if module.class_name != wanted:
        raise JaasConfigError(f"SASL/{mechanism} needs {wanted}, not {module.class_name}")
    return module


def inter_broker_security(config: BrokerConfig) -> Security:
    """How this broker connects to the others (Kafka's inter-broker client): on the
    inter-broker listener's protocol, trusting its trust store, and for SASL with
    sasl.mechanism.inter.broker.protocol and the username and password options of the
    listener's JAAS config for that mechanism (which, for PLAIN, must also list the user)."""
    name = config.inter_broker_listener
    protocol = config.listener_security_protocols()[name]
    ssl_context = None
    mechanism, username, password = "PLAIN", None, None
    try:
        if protocol in ("SSL", "SASL_SSL"):
            ssl_context = client_context(lambda prop: _ssl_setting(config, name, protocol, prop))
        if protocol.startswith("SASL_"):
            mechanism = str(config["sasl.mechanism.inter.broker.protocol"])
            if mechanism not in config.listener_value(name, "sasl.enabled.mechanisms"):  # type: ignore[operator]
                raise ConfigError(
                    "sasl.mechanism.inter.broker.protocol must be included in "
                    "sasl.enabled.mechanisms when SASL is used for inter-broker communication"
                )
            why = "is the inter-broker listener"
            options = _login_module(config, name, mechanism, why).options
            username, password = options.get("username"), options.get("password")
            if username is None or password is None:
                raise JaasConfigError(
                    f"the JAAS config of the inter-broker listener {name} for {mechanism} "
                    "needs username and password options: the broker's own credentials"
                )
    except (SslConfigError, JaasConfigError) as e:
        raise ConfigError(f"Listener {name}: {e}") from e
    return Security(protocol, ssl_context, mechanism, username, password)
