"""Distinguished names in RFC 2253 form and ssl.principal.mapping.rules, with the examples
of Kafka's documentation."""

from __future__ import annotations

import pytest

from broker.security.tls import (
    NoMatchingRule,
    SslConfigError,
    SslPrincipalMapper,
    distinguished_name,
)


def subject(*rdns):
    """getpeercert()'s subject: RDNs from the most general, each a tuple of pairs."""
    return tuple(tuple(rdn) for rdn in rdns)


def test_distinguished_name_in_rfc2253_order_and_keywords():
    s = subject(
        [("countryName", "NO")],
        [("stateOrProvinceName", "Oslo")],
        [("localityName", "Oslo")],
        [("organizationName", "Fjord")],
        [("organizationalUnitName", "eng")],
        [("commonName", "alice")],
    )
    assert distinguished_name(s) == "CN=alice,OU=eng,O=Fjord,L=Oslo,ST=Oslo,C=NO"


def test_special_characters_are_escaped_and_other_attributes_are_hex():
    s = subject(
        [("domainComponent", "com")],
        [("commonName", "Smith, John"), ("emailAddress", "js@x.org")],
        [("commonName", " #lead+trail ")],
    )
    assert distinguished_name(s) == (
        "CN=\\ #lead\\+trail\\ ,CN=Smith\\, John+1.2.840.113549.1.9.1=#16086a7340782e6f7267,DC=com"
    )


RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
    "DEFAULT"
)


@pytest.mark.parametrize(
    ("dn", "name"),
    [
        ("CN=kafka1,OU=ServiceUsers,O=Org,C=US", "kafka1"),
        ("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US", "duke@javasoft"),
        ("cn=duke,O=x", "DUKE"),
        ("O=Fjord,C=NO", "O=Fjord,C=NO"),
    ],
)
def test_kafka_documentation_mapping_rules(dn, name):
    assert SslPrincipalMapper(RULES).name(dn) == name


def test_default_is_the_whole_dn_and_no_matching_rule_fails():
    assert SslPrincipalMapper("DEFAULT").name("CN=a,O=b") == "CN=a,O=b"
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("RULE:^CN=x$/y/").name("CN=a")


def test_slashes_and_literal_dollars_in_rules():
    mapper = SslPrincipalMapper(r"RULE:^CN=([^,]*)\/(.*)$/$2\$$1/")
    assert mapper.name("CN=team/alice") == "alice$team"


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*$/$1/", "RULE:abc", "NONSENSE"])
def test_invalid_rules_are_refused(rules):
    with pytest.raises(SslConfigError):
        SslPrincipalMapper(rules)
