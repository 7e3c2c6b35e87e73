"""Throwaway PEM certificates for TLS tests: a CA, a server certificate for 127.0.0.1 and
localhost, and client certificates with a chosen subject (test helper)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_ATTRIBUTES = {
    "CN": NameOID.COMMON_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "O": NameOID.ORGANIZATION_NAME,
    "L": NameOID.LOCALITY_NAME,
    "ST": NameOID.STATE_OR_PROVINCE_NAME,
    "C": NameOID.COUNTRY_NAME,
}


@dataclass
class Pem:
    key: str
    certificate: str

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """Writes <name>.key and <name>.crt; returns their paths."""
        key, cert = directory / f"{name}.key", directory / f"{name}.crt"
        key.write_text(self.key)
        cert.write_text(self.certificate)
        return key, cert


def _name(subject: str) -> x509.Name:
    """'CN=alice,OU=eng,O=Fjord,C=NO' (RFC 2253 order: most specific first)."""
    parts = [p.split("=", 1) for p in subject.split(",")]
    return x509.Name([x509.NameAttribute(_ATTRIBUTES[k], v) for k, v in reversed(parts)])


def _pem_key(key, password: bytes | None = None) -> str:
    encryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    ).decode()


class CertificateAuthority:
    def __init__(self, subject: str = "CN=Fjord Test CA,O=Fjord,C=NO") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(subject)
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def issue(self, subject: str, server: bool = False, password: bytes | None = None) -> Pem:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(subject))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
        cert = builder.sign(self.key, hashes.SHA256())
        return Pem(_pem_key(key, password), cert.public_bytes(serialization.Encoding.PEM).decode())
