"""SCRAM-SHA-256/512 (flux.auth.scram): RFC 7677's example, both mechanisms, every refusal, and
that no secret reaches an error message or a repr."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from flux.auth.errors import (
    AuthenticationError,
    IllegalSaslStateError,
    UnacceptableCredentialError,
)
from flux.auth.scram import (
    MECHANISM_TYPES,
    MECHANISMS,
    ScramClient,
    ScramCredential,
    ScramServer,
    failure_message,
)
from hypothesis import given, settings
from hypothesis import strategies as st

# RFC 7677 section 3.
RFC_PASSWORD = "pencil"
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

SHA256, SHA512 = "SCRAM-SHA-256", "SCRAM-SHA-512"


def rfc_credential() -> ScramCredential:
    return ScramCredential.from_password(SHA256, RFC_PASSWORD, salt=RFC_SALT, iterations=4096)


RFC_CREDENTIAL = rfc_credential()


def server_for(credentials: dict[str, ScramCredential], mechanism: str = SHA256, **options):
    return ScramServer(mechanism, credentials.get, **options)


def exchange(server: ScramServer, client: ScramClient) -> None:
    client.verify(server.step(client.final(server.step(client.first()))))


def proof_for(
    hash_name: str, password: str, salt: bytes, iterations: int, auth_message: bytes
) -> bytes:
    """RFC 5802's ClientProof, written out independently of flux.auth.scram."""
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored_key = hashlib.new(hash_name, client_key).digest()
    signature = hmac.new(stored_key, auth_message, hash_name).digest()
    return bytes(a ^ b for a, b in zip(client_key, signature, strict=True))


def final_for(gs2_header: str, client_first_bare: str, server_first: bytes, password: str) -> bytes:
    """A client-final message for a hand-built client-first (gs2 header variants)."""
    fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
    without_proof = f"c={base64.b64encode(gs2_header.encode()).decode()},r={fields['r']}"
    auth_message = f"{client_first_bare},{server_first.decode()},{without_proof}".encode()
    proof = proof_for(
        "sha256", password, base64.b64decode(fields["s"]), int(fields["i"]), auth_message
    )
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def test_mechanisms_and_kafka_bounds() -> None:
    assert dict(MECHANISMS) == {SHA256: "sha256", SHA512: "sha512"}
    assert dict(MECHANISM_TYPES) == {SHA256: 1, SHA512: 2}


def test_rfc7677_example_through_the_client() -> None:
    client = ScramClient(SHA256, "user", RFC_PASSWORD, nonce=RFC_CLIENT_NONCE)
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)
    assert client.complete


def test_rfc7677_example_through_the_server() -> None:
    server = server_for({"user": rfc_credential()}, nonce_factory=lambda: RFC_SERVER_NONCE)
    assert server.step(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not server.complete and server.username is None
    assert server.step(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.username == "user"


def test_salted_password_gives_the_same_credential() -> None:
    salted = hashlib.pbkdf2_hmac("sha256", RFC_PASSWORD.encode(), RFC_SALT, 4096)
    assert ScramCredential.from_salted_password(SHA256, RFC_SALT, salted, 4096) == (
        rfc_credential()
    )


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
@pytest.mark.parametrize("iterations", [4096, 8192])
def test_round_trip(mechanism: str, iterations: int) -> None:
    credential = ScramCredential.from_password(mechanism, "s3cret", iterations=iterations)
    assert credential.iterations == iterations
    assert len(credential.stored_key) == hashlib.new(MECHANISMS[mechanism]).digest_size
    server = server_for({"alice": credential}, mechanism)
    client = ScramClient(mechanism, "alice", "s3cret")
    exchange(server, client)
    assert server.complete and server.username == "alice" and client.complete


def test_mechanism_of_the_credential_must_match() -> None:
    credential = ScramCredential.from_password(SHA512, "s3cret")
    server = server_for({"alice": credential}, SHA256)
    client = ScramClient(SHA256, "alice", "s3cret")
    with pytest.raises(AuthenticationError, match="invalid credentials"):
        exchange(server, client)


def test_wrong_password_fails_with_kafkas_message() -> None:
    server = server_for({"alice": ScramCredential.from_password(SHA512, "right")}, SHA512)
    client = ScramClient(SHA512, "alice", "wrong")
    server_first = server.step(client.first())
    with pytest.raises(AuthenticationError) as failure:
        server.step(client.final(server_first))
    assert str(failure.value) == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-512"
    )
    assert failure.value.reason == "invalid client proof"
    assert not server.complete and server.username is None
    with pytest.raises(IllegalSaslStateError):
        server.step(b"anything")


def test_unknown_user_looks_like_a_wrong_password() -> None:
    known = {"alice": ScramCredential.from_password(SHA256, "right")}
    first_answers = []
    errors = []
    for user, password in (("mallory", "guess"), ("mallory", "guess"), ("alice", "guess")):
        server = server_for(known)
        client = ScramClient(SHA256, user, password)
        server_first = server.step(client.first())
        first_answers.append(dict(item.split("=", 1) for item in server_first.decode().split(",")))
        with pytest.raises(AuthenticationError) as failure:
            server.step(client.final(server_first))
        errors.append(failure.value)
    unknown, again, real = first_answers
    # The made-up salt is stable per user and shaped like a real one.
    assert unknown["s"] == again["s"] and unknown["i"] == again["i"] == "4096"
    assert len(base64.b64decode(unknown["s"])) == 32
    assert len({str(error) for error in errors}) == 1
    assert {error.reason for error in errors} == {"invalid client proof"}
    assert real["s"] != unknown["s"]


def test_unknown_user_salt_depends_on_the_secret() -> None:
    def salt(secret: bytes) -> str:
        server = server_for({}, unknown_user_secret=secret)
        return server.step(b"n,,n=nobody,r=abc").decode().split(",")[1]

    assert salt(b"one") == salt(b"one") != salt(b"two")


def test_tampered_nonce_fails() -> None:
    server = server_for({"user": rfc_credential()}, nonce_factory=lambda: RFC_SERVER_NONCE)
    server.step(RFC_CLIENT_FIRST)
    tampered = RFC_CLIENT_FINAL.replace(b"k0,p=", b"k1,p=")
    with pytest.raises(AuthenticationError) as failure:
        server.step(tampered)
    assert failure.value.reason == "invalid nonce in the client-final message"


def test_tampered_proof_fails() -> None:
    server = server_for({"user": rfc_credential()}, nonce_factory=lambda: RFC_SERVER_NONCE)
    server.step(RFC_CLIENT_FIRST)
    with pytest.raises(AuthenticationError, match="invalid credentials"):
        server.step(RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=dHzc"))


def test_server_signature_is_checked_by_the_client() -> None:
    client = ScramClient(SHA256, "user", RFC_PASSWORD, nonce=RFC_CLIENT_NONCE)
    client.final(RFC_SERVER_FIRST)
    with pytest.raises(AuthenticationError, match="invalid server signature"):
        client.verify(b"v=" + base64.b64encode(bytes(32)))
    assert not client.complete


@pytest.mark.parametrize(
    "server_first, reason",
    [
        (b"r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
        (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
        (b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=100", "iteration"),
        (b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1000000", "iteration"),
        (b"r=rOprNGfwEbeRWgbNEkqOx,s=!!,i=4096", "salt"),
        (b"m=x,r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "malformed"),
    ],
)
def test_client_refuses_bad_server_first(server_first: bytes, reason: str) -> None:
    client = ScramClient(SHA256, "user", RFC_PASSWORD, nonce=RFC_CLIENT_NONCE)
    with pytest.raises(AuthenticationError, match=reason):
        client.final(server_first)


def test_client_reports_a_server_error() -> None:
    client = ScramClient(SHA256, "user", RFC_PASSWORD, nonce=RFC_CLIENT_NONCE)
    client.final(RFC_SERVER_FIRST)
    with pytest.raises(AuthenticationError, match="invalid-proof"):
        client.verify(b"e=invalid-proof")


def test_client_steps_in_order() -> None:
    client = ScramClient(SHA256, "user", RFC_PASSWORD, nonce=RFC_CLIENT_NONCE)
    with pytest.raises(IllegalSaslStateError):
        client.verify(RFC_SERVER_FINAL)
    client.final(RFC_SERVER_FIRST)
    with pytest.raises(IllegalSaslStateError):
        client.final(RFC_SERVER_FIRST)


@pytest.mark.parametrize(
    "client_first, reason",
    [
        (b"p=tls-unique,,n=user,r=abc", "channel binding is not supported"),
        (b"x,,n=user,r=abc", "malformed gs2 header"),
        (b"n,,m=ext,n=user,r=abc", "mandatory extension not supported"),
        (b"n,,n=user", "malformed client-first message"),
        (b"n,,r=abc,n=user", "malformed client-first message"),
        (b"n,,n=,r=abc", "malformed client-first message"),
        (b"n,,n=user,r=a\x7fb", "malformed client-first message"),
        (b"n,,n=us=41er,r=abc", "malformed client-first message"),
        (b"n,b=user,n=user,r=abc", "malformed authorization id"),
        (b"n,,n=\xff,r=abc", "client-first message too long or not UTF-8"),
        (b"n,,n=user,r=" + b"a" * 5000, "client-first message too long or not UTF-8"),
    ],
)
def test_server_refuses_malformed_client_first(client_first: bytes, reason: str) -> None:
    server = server_for({"user": rfc_credential()})
    with pytest.raises(AuthenticationError) as failure:
        server.step(client_first)
    assert failure.value.reason == reason
    assert str(failure.value) == failure_message(SHA256)


def test_delegation_tokens_are_refused() -> None:
    server = server_for({"user": rfc_credential()})
    with pytest.raises(AuthenticationError, match="delegation tokens are not supported"):
        server.step(b"n,,n=user,r=abc,tokenauth=true")


def test_other_extensions_are_ignored_but_signed() -> None:
    server = server_for({"user": rfc_credential()})
    bare = "n=user,r=abc,tokenauth=false,foo=bar"
    server_first = server.step(f"n,,{bare}".encode())
    server.step(final_for("n,,", bare, server_first, RFC_PASSWORD))
    assert server.complete


@pytest.mark.parametrize("gs2_header", ["y,,", "n,a=user,", "y,a=user,"])
def test_accepted_gs2_headers(gs2_header: str) -> None:
    server = server_for({"user": rfc_credential()})
    bare = "n=user,r=clientnonce"
    server_first = server.step(f"{gs2_header}{bare}".encode())
    server.step(final_for(gs2_header, bare, server_first, RFC_PASSWORD))
    assert server.complete and server.username == "user"


def test_authorization_id_must_be_the_user() -> None:
    server = server_for({"user": rfc_credential()})
    with pytest.raises(AuthenticationError) as failure:
        server.step(b"n,a=admin,n=user,r=abc")
    assert str(failure.value) == (
        "Authentication failed: Client requested an authorization id that is different from "
        "username"
    )


def test_channel_binding_data_must_repeat_the_gs2_header() -> None:
    server = server_for({"user": rfc_credential()})
    bare = "n=user,r=clientnonce"
    server_first = server.step(f"n,,{bare}".encode())
    # A proof over "y,," while the first message said "n,,": a downgrade the server must see.
    with pytest.raises(AuthenticationError) as failure:
        server.step(final_for("y,,", bare, server_first, RFC_PASSWORD))
    assert failure.value.reason == "channel binding data does not match the gs2 header"


@pytest.mark.parametrize(
    "client_final",
    [
        b"",
        b"c=biws,r=x",
        b"r=x,c=biws,p=AAAA",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=!!!!",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",
    ],
)
def test_server_refuses_malformed_client_final(client_final: bytes) -> None:
    server = server_for({"user": rfc_credential()}, nonce_factory=lambda: RFC_SERVER_NONCE)
    server.step(RFC_CLIENT_FIRST)
    with pytest.raises(AuthenticationError, match="invalid credentials"):
        server.step(client_final)


@pytest.mark.parametrize("username", ["a,b", "a=b", "=2C", "x=3D,y", "ünï", "user,=,="])
def test_usernames_are_escaped(username: str) -> None:
    seen = []

    def lookup(name: str) -> ScramCredential | None:
        seen.append(name)
        return ScramCredential.from_password(SHA256, "pw") if name == username else None

    client = ScramClient(SHA256, username, "pw")
    first = client.first().decode()
    assert first.split(",")[2] == "n=" + username.replace("=", "=3D").replace(",", "=2C")
    server = ScramServer(SHA256, lookup)
    exchange(server, client)
    assert seen == [username] and server.username == username


def test_completed_exchange_refuses_more_messages() -> None:
    server = server_for({"user": rfc_credential()}, nonce_factory=lambda: RFC_SERVER_NONCE)
    server.step(RFC_CLIENT_FIRST)
    server.step(RFC_CLIENT_FINAL)
    with pytest.raises(IllegalSaslStateError):
        server.step(RFC_CLIENT_FINAL)
    assert server.complete


def test_credential_bounds() -> None:
    with pytest.raises(UnacceptableCredentialError, match="Too few iterations"):
        ScramCredential.from_password(SHA256, "pw", iterations=4095)
    with pytest.raises(UnacceptableCredentialError, match="Too many iterations"):
        ScramCredential.from_password(SHA256, "pw", iterations=16385)
    with pytest.raises(UnacceptableCredentialError, match="unknown SCRAM mechanism"):
        ScramCredential.from_password("SCRAM-SHA-1", "pw")
    with pytest.raises(UnacceptableCredentialError, match="salt"):
        ScramCredential.from_password(SHA256, "pw", salt=b"")
    with pytest.raises(UnacceptableCredentialError, match="salted password"):
        ScramCredential.from_salted_password(SHA512, b"salt", bytes(32), 4096)
    with pytest.raises(UnacceptableCredentialError, match="keys must be 32 bytes"):
        ScramCredential(SHA256, b"salt", bytes(31), bytes(32), 4096)
    assert ScramCredential.from_password(SHA256, "pw", iterations=16384).iterations == 16384


def test_credential_dict_round_trip() -> None:
    credential = ScramCredential.from_password(SHA512, "pw", iterations=5000)
    data = credential.to_dict()
    assert data["mechanism"] == SHA512 and data["iterations"] == 5000
    assert base64.b64decode(data["salt"]) == credential.salt
    assert ScramCredential.from_dict(data) == credential
    with pytest.raises(UnacceptableCredentialError, match="stored_key"):
        ScramCredential.from_dict({**data, "stored_key": "not base64!"})
    with pytest.raises(UnacceptableCredentialError, match="iterations"):
        ScramCredential.from_dict({**data, "iterations": "5000"})


def test_verify_password() -> None:
    credential = rfc_credential()
    assert credential.verify_password(RFC_PASSWORD)
    assert not credential.verify_password("pencil ")
    assert not credential.verify_password("")


def test_no_secret_in_reprs_or_errors() -> None:
    password = "hunter2-very-secret"
    credential = ScramCredential.from_password(SHA256, password)
    secrets = [
        password,
        base64.b64encode(credential.salt).decode(),
        base64.b64encode(credential.stored_key).decode(),
        base64.b64encode(credential.server_key).decode(),
        credential.salt.hex(),
        credential.stored_key.hex(),
        credential.server_key.hex(),
    ]
    texts = [repr(credential), str(credential)]
    assert repr(credential) == "ScramCredential(mechanism='SCRAM-SHA-256', iterations=4096)"

    server = server_for({"alice": credential})
    client = ScramClient(SHA256, "alice", password)
    texts += [repr(server), repr(client)]
    final = client.final(server.step(client.first()))
    secrets.append(final.decode().rsplit("p=", 1)[1])
    texts += [repr(server), repr(client)]
    for bad_final in (final.replace(b"p=", b"p=A"), final[:-8] + b"AAAAAAA=", b"garbage"):
        server = server_for({"alice": credential})
        server.step(client.first())
        with pytest.raises(AuthenticationError) as failure:
            server.step(bad_final)
        texts += [str(failure.value), repr(failure.value), str(failure.value.reason)]
    for text in texts:
        for secret in secrets:
            assert secret not in text


@settings(max_examples=25)
@given(
    username=st.text(
        st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20
    ),
    password=st.text(max_size=20),
    mechanism=st.sampled_from([SHA256, SHA512]),
)
def test_any_user_and_password_round_trip(username: str, password: str, mechanism: str) -> None:
    credential = ScramCredential.from_password(mechanism, password)
    server = ScramServer(mechanism, {username: credential}.get)
    exchange(server, ScramClient(mechanism, username, password))
    assert server.username == username


@settings(max_examples=300)
@given(first=st.binary(max_size=200), final=st.binary(max_size=200))
def test_arbitrary_bytes_only_fail_authentication(first: bytes, final: bytes) -> None:
    server = ScramServer(SHA256, lambda _name: RFC_CREDENTIAL)
    try:
        server.step(first)
        server.step(final)
    except AuthenticationError:
        pass
    assert not server.complete
