"""SASL/PLAIN (flux.auth.plain) against stored SCRAM credentials."""

from __future__ import annotations

import pytest
from flux.auth.errors import AuthenticationError, IllegalSaslStateError
from flux.auth.plain import MAX_PLAIN_MESSAGE_BYTES, PlainServer, parse_plain
from flux.auth.scram import ScramCredential
from hypothesis import given
from hypothesis import strategies as st

PASSWORD = "alice-secret"
CREDENTIALS = {"alice": ScramCredential.from_password("SCRAM-SHA-256", PASSWORD)}


def verify(username: str, password: str) -> bool:
    credential = CREDENTIALS.get(username)
    return credential is not None and credential.verify_password(password)


@pytest.mark.parametrize(
    "message, fields",
    [
        (b"\x00alice\x00secret", ("", "alice", "secret")),
        (b"alice\x00alice\x00secret", ("alice", "alice", "secret")),
        ("\x00jörg\x00pässwörd".encode(), ("", "jörg", "pässwörd")),
        (b"\x00alice\x00pass:with spaces=and,commas", ("", "alice", "pass:with spaces=and,commas")),
    ],
)
def test_parse(message: bytes, fields: tuple[str, str, str]) -> None:
    assert parse_plain(message) == fields


@pytest.mark.parametrize(
    "message, text",
    [
        (b"\x00\x00secret", "Authentication failed: username not specified"),
        (b"\x00alice\x00", "Authentication failed: password not specified"),
        (
            b"bob\x00alice\x00secret",
            "Authentication failed: Client requested an authorization id that is different "
            "from username",
        ),
        (b"alice\x00secret", "invalid credentials with SASL mechanism PLAIN"),
        (b"\x00alice\x00se\x00cret", "invalid credentials with SASL mechanism PLAIN"),
        (b"", "invalid credentials with SASL mechanism PLAIN"),
        (b"\x00alice\x00\xff\xfe", "invalid credentials with SASL mechanism PLAIN"),
        (
            b"\x00alice\x00" + b"x" * MAX_PLAIN_MESSAGE_BYTES,
            "invalid credentials with SASL mechanism PLAIN",
        ),
    ],
)
def test_parse_refuses(message: bytes, text: str) -> None:
    with pytest.raises(AuthenticationError, match=text):
        parse_plain(message)


def test_server_accepts_the_stored_password() -> None:
    server = PlainServer(verify)
    assert not server.complete
    assert server.step(b"\x00alice\x00" + PASSWORD.encode()) == b""
    assert server.complete and server.username == "alice"
    with pytest.raises(IllegalSaslStateError):
        server.step(b"\x00alice\x00" + PASSWORD.encode())


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("mallory", PASSWORD)])
def test_wrong_password_and_unknown_user_fail_alike(user: str, password: str) -> None:
    server = PlainServer(verify)
    with pytest.raises(AuthenticationError) as failure:
        server.step(f"\x00{user}\x00{password}".encode())
    assert str(failure.value) == "Authentication failed: Invalid username or password"
    assert password not in repr(failure.value) and password not in str(failure.value.reason)
    assert not server.complete and server.username is None
    with pytest.raises(IllegalSaslStateError):
        server.step(b"\x00alice\x00" + PASSWORD.encode())


def test_malformed_message_fails_the_exchange() -> None:
    server = PlainServer(verify)
    with pytest.raises(AuthenticationError):
        server.step(b"alice")
    with pytest.raises(IllegalSaslStateError):
        server.step(b"\x00alice\x00" + PASSWORD.encode())


@given(st.binary(max_size=64))
def test_arbitrary_bytes_only_fail_authentication(message: bytes) -> None:
    try:
        parse_plain(message)
    except AuthenticationError as error:
        assert "\x00" not in str(error)
