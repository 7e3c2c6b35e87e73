"""Credentials in free text are masked; the rest of the text says what it said."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.redaction import MASK, has_credentials, redact

# What a password may be once written unquoted into a URL, a conninfo or a query string.
secrets = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1).map(
    lambda s: quote(s, safe="") + "x"
)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("postgres://fjord:s3cret@db/x", f"postgres://fjord:{MASK}@db/x"),
        ("postgresql://fjord:p@ss@db:5432/fjord", f"postgresql://fjord:{MASK}@db:5432/fjord"),
        ("redis://:pw@127.0.0.1:6379/1", f"redis://:{MASK}@127.0.0.1:6379/1"),
        (
            "could not connect to mysql+pymysql://app:hunter2@db/app; mail ops@example.com",
            f"could not connect to mysql+pymysql://app:{MASK}@db/app; mail ops@example.com",
        ),
        (
            "host=db user=fjord password=s3cret dbname=x",
            f"host=db user=fjord password={MASK} dbname=x",
        ),
        ("password='s3 \\' cret' dbname=x", f"password='{MASK}' dbname=x"),
        ("PGPASSWORD=s3cret psql", f"PGPASSWORD={MASK} psql"),
        ("ssl.keystore.password: s3cret", f"ssl.keystore.password: {MASK}"),
        ('{"password": "s3cret", "user": "fjord"}', f'{{"password": "{MASK}", "user": "fjord"}}'),
        ("{'DJANGO_SECRET_KEY': 'k3y'}", f"{{'DJANGO_SECRET_KEY': '{MASK}'}}"),
        ("client_secret=abc&scope=x", f"client_secret={MASK}&scope=x"),
        ("https://h/cb?token=abc&next=/", f"https://h/cb?token={MASK}&next=/"),
        (
            'PlainLoginModule required username="admin" password="adm\\"in" user_alice="al";',
            f'PlainLoginModule required username="admin" password="{MASK}" user_alice="{MASK}";',
        ),
        (
            "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.x.PlainLoginModule required "
            'username="a" password="b";\nnext line',
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={MASK}\nnext line",
        ),
        (
            '{"sasl.jaas.config": "x required password=\\"b\\";"}',
            f'{{"sasl.jaas.config": "{MASK}"}}',
        ),
    ],
)
def test_the_secret_is_masked_and_the_rest_stays(text, masked):
    assert redact(text) == masked
    assert has_credentials(text)


@pytest.mark.parametrize(
    "text",
    [
        "http://u@h/x",
        "http://host:8080/path?mail=a@b.com",
        "tokens: 5, password:",
        'password="" and user_x=1',
        "sasl.oauthbearer.token.endpoint.url=https://idp/token",
        "KafkaStorageException: /var/lib/fjord/log-0 is offline",
        "",
    ],
)
def test_text_without_a_secret_is_unchanged(text):
    assert redact(text) == text
    assert not has_credentials(text)


@given(
    scheme=st.sampled_from(["postgres", "postgresql", "redis", "http", "git+ssh"]),
    user=st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
    secret=secrets,
    before=st.text(),
    after=st.text(),
)
def test_a_url_password_never_survives(scheme, user, secret, before, after):
    masked = redact(f"{before} {scheme}://{user}:{secret}@db.example:5432/fjord {after}")
    assert f"{user}:{MASK}@db.example:5432/fjord" in masked
    assert f":{secret}@" not in masked


@given(
    key=st.sampled_from(["password", "ssl.key.password", "PGPASSWORD", "client_secret", "token"]),
    separator=st.sampled_from(["=", ": ", " = "]),
    quoting=st.sampled_from(["", "'", '"']),
    secret=secrets,
    before=st.text(),
)
def test_a_keyed_secret_never_survives(key, separator, quoting, secret, before):
    masked = redact(f"{before} {key}{separator}{quoting}{secret}{quoting} dbname=x")
    assert f"{key}{separator}{quoting}{MASK}{quoting} dbname=x" in masked
    assert secret not in masked.split(key)[-1]


@given(st.text(st.characters(exclude_characters=":=@")))
def test_text_without_any_key_or_userinfo_is_unchanged(text):
    assert redact(text) == text


@given(st.text())
def test_redact_is_idempotent(text):
    once = redact(text)
    assert redact(once) == once
