"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them. Pure: no I/O.

Credentials. A ``ScramCredential`` is what the metadata log stores for one user and mechanism:
the salt, StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword,
"Server Key") and the iteration count i, where SaltedPassword = Hi(password, salt, i) is
PBKDF2-HMAC. Never the password. Kafka bounds i to [4096, 16384] (``ScramMechanism``'s minimum,
``ScramControlManager.MAX_ITERATIONS``); outside them ``UnacceptableCredentialError`` is raised
before any hashing, so a request cannot make us spin.

The server exchange (``ScramServer.step``) takes two client messages:

1. client-first: a gs2 header, "n,," or "y,," ("y": the client could bind to the channel but
   thinks we cannot, which is true, we never offer a -PLUS mechanism), optionally with
   "a=<authzid>", which must equal the user name. "p=" (channel binding) is refused. Then
   client-first-bare: "n=<saslname>,r=<client nonce>" and extensions "name=value", which Kafka
   ignores except ``tokenauth=true`` (a delegation token): Flux has no delegation tokens, so
   that is refused. A leading "m=" (a mandatory extension) is refused as RFC 5802 requires
   (Kafka parses and ignores it). A saslname writes "," and "=" as "=2C" and "=3D"; any other
   "=" is malformed. User names may be any UTF-8 without NUL (Kafka's parser accepts ASCII
   only). No SASLprep: like Kafka, names and passwords are their UTF-8 bytes.
   The answer is server-first: "r=<client nonce><server nonce>,s=<base64 salt>,i=<i>".
2. client-final: "c=<base64 gs2 header>,r=<combined nonce>[,extensions],p=<base64 proof>".
   AuthMessage is client-first-bare "," server-first "," client-final-without-proof, taken from
   the messages as received (Kafka re-renders them from parsed fields, which is the same text
   for every client that sends no extension in its final message). The proof is accepted when
   H(proof XOR HMAC(StoredKey, AuthMessage)) equals StoredKey, compared in constant time. The
   answer is server-final: "v=<base64 HMAC(ServerKey, AuthMessage)>".

An unknown user is not revealed (RFC 5802 section 5.1): the first step answers with a salt
made from a secret and the user name (so it is the same on every attempt, like a real one) and
the default iteration count, and the proof step then fails exactly as a wrong password does.
Kafka fails the first step instead, but tells the client only the generic message below.

Every failure raises ``AuthenticationError`` carrying Kafka's client-facing message ("Authentication
failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256")
and a fixed ``reason`` for the server's log. Only two failures have their own message, neither
depending on a secret: an authorization id other than the user, and a delegation token.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from flux.auth.errors import AuthenticationError, IllegalSaslStateError, UnacceptableCredentialError

__all__ = [
    "DEFAULT_ITERATIONS",
    "MAX_ITERATIONS",
    "MAX_MESSAGE_BYTES",
    "MAX_NONCE_CHARS",
    "MAX_SALT_BYTES",
    "MECHANISMS",
    "MECHANISM_TYPES",
    "MIN_ITERATIONS",
    "SALT_BYTES",
    "ScramClient",
    "ScramCredential",
    "ScramServer",
    "failure_message",
]

#: SASL mechanism name -> ``hashlib`` hash name.
MECHANISMS: Mapping[str, str] = MappingProxyType(
    {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
)
#: Kafka's wire codes of the mechanisms (Describe/AlterUserScramCredentials).
MECHANISM_TYPES: Mapping[str, int] = MappingProxyType({"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2})
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
#: Length of a random salt from ``from_password``, and of the made-up salt of an unknown user.
SALT_BYTES = 32
#: Kafka sets no bound; clients use 16 to 32 bytes.
MAX_SALT_BYTES = 1024
#: One SCRAM message (real ones are under 300 bytes).
MAX_MESSAGE_BYTES = 4096
#: The client part and the server part of a nonce, each (Kafka's are about 26 characters).
MAX_NONCE_CHARS = 256

# Keys the made-up salts of unknown users (see the module docstring). Per process unless the
# broker passes ``unknown_user_secret``.
_UNKNOWN_USER_SECRET = secrets.token_bytes(32)


def failure_message(mechanism: str) -> str:
    """Kafka's message for a failed SASL authentication (``SaslServerAuthenticator``)."""
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


def _hash_name(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise UnacceptableCredentialError(
            f"unknown SCRAM mechanism {mechanism!r}; expected one of {sorted(MECHANISMS)}"
        ) from None


def _check_iterations(iterations: int) -> None:
    if iterations < MIN_ITERATIONS:
        raise UnacceptableCredentialError(
            f"Too few iterations: {iterations} is below the minimum of {MIN_ITERATIONS}"
        )
    if iterations > MAX_ITERATIONS:
        raise UnacceptableCredentialError(
            f"Too many iterations: {iterations} is above the maximum of {MAX_ITERATIONS}"
        )


def _check_salt(salt: bytes) -> None:
    if not 0 < len(salt) <= MAX_SALT_BYTES:
        raise UnacceptableCredentialError(f"the salt must be 1 to {MAX_SALT_BYTES} bytes")


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, hash_name)


def _hash(hash_name: str, data: bytes) -> bytes:
    return hashlib.new(hash_name, data).digest()


def _password_bytes(password: str) -> bytes:
    try:
        return password.encode("utf-8")
    except UnicodeEncodeError:
        # The codec's message would quote a character of the password.
        raise ValueError("a password must be encodable as UTF-8") from None


def _salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, _password_bytes(password), salt, iterations)


def _client_key(hash_name: str, salted_password: bytes) -> bytes:
    return _hmac(hash_name, salted_password, b"Client Key")


def _server_key(hash_name: str, salted_password: bytes) -> bytes:
    return _hmac(hash_name, salted_password, b"Server Key")


def _xor(left: bytes, right: bytes) -> bytes:
    assert len(left) == len(right), "SCRAM xor of unequal lengths"
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None


def _escape_username(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _unescape_username(saslname: str) -> str | None:
    """The user name of a saslname, or None when an "=" is not part of "=2C" or "=3D"."""
    first, *rest = saslname.split("=")
    parts = [first]
    for part in rest:
        if part.startswith("2C"):
            parts.append("," + part[2:])
        elif part.startswith("3D"):
            parts.append("=" + part[2:])
        else:
            return None
    return "".join(parts)


def _is_nonce(nonce: str) -> bool:
    """RFC 5802's printable: 0x21-0x7E except ","."""
    return 0 < len(nonce) <= MAX_NONCE_CHARS and all(
        "\x21" <= char <= "\x7e" and char != "," for char in nonce
    )


def _attributes(text: str) -> list[tuple[str, str]] | None:
    """``name=value`` pairs split at ","; None if one has no "=" or a name not ASCII letters."""
    pairs = []
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not (name.isascii() and name.isalpha()):
            return None
        pairs.append((name, value))
    return pairs


def _decode(message: bytes) -> str | None:
    if len(message) > MAX_MESSAGE_BYTES:
        return None
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True, repr=False)
class ScramCredential:
    """One user's SCRAM credential for one mechanism, as stored; never holds a password.
    Construction checks Kafka's bounds (``UnacceptableCredentialError``). Immutable."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __post_init__(self) -> None:
        hash_name = _hash_name(self.mechanism)
        _check_iterations(self.iterations)
        _check_salt(self.salt)
        size = hashlib.new(hash_name).digest_size
        if len(self.stored_key) != size or len(self.server_key) != size:
            raise UnacceptableCredentialError(f"{self.mechanism} keys must be {size} bytes")

    @classmethod
    def from_password(
        cls,
        mechanism: str,
        password: str,
        *,
        salt: bytes | None = None,
        iterations: int = DEFAULT_ITERATIONS,
    ) -> ScramCredential:
        """The credential of ``password``, with a random salt of ``SALT_BYTES`` by default
        (``ValueError`` for a password with lone surrogates, which UTF-8 cannot encode)."""
        hash_name = _hash_name(mechanism)
        _check_iterations(iterations)
        salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
        _check_salt(salt)
        salted_password = _salted_password(hash_name, password, salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted_password, iterations)

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        """The credential of what AlterUserScramCredentials carries: the client computed
        SaltedPassword = Hi(password, salt, iterations), which must be one digest long."""
        hash_name = _hash_name(mechanism)
        if len(salted_password) != hashlib.new(hash_name).digest_size:
            raise UnacceptableCredentialError(
                f"a {mechanism} salted password must be one {hash_name} digest long"
            )
        stored_key = _hash(hash_name, _client_key(hash_name, salted_password))
        server_key = _server_key(hash_name, salted_password)
        return cls(mechanism, salt, stored_key, server_key, iterations)

    def verify_password(self, password: str) -> bool:
        """Whether ``password`` is the one this credential was made from (for SASL/PLAIN and
        HTTP Basic). Costs one PBKDF2 of ``iterations`` rounds; compares in constant time."""
        hash_name = _hash_name(self.mechanism)
        try:
            salted_password = _salted_password(hash_name, password, self.salt, self.iterations)
        except ValueError:
            return False
        stored_key = _hash(hash_name, _client_key(hash_name, salted_password))
        return hmac.compare_digest(stored_key, self.stored_key)

    def to_dict(self) -> dict[str, Any]:
        """For the metadata log: bytes as base64 strings."""
        return {
            "mechanism": self.mechanism,
            "salt": _b64(self.salt),
            "stored_key": _b64(self.stored_key),
            "server_key": _b64(self.server_key),
            "iterations": self.iterations,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScramCredential:
        fields = {}
        for name in ("salt", "stored_key", "server_key"):
            value = data.get(name)
            decoded = _unb64(value) if isinstance(value, str) else None
            if decoded is None:
                raise UnacceptableCredentialError(f"credential field {name!r} is not base64")
            fields[name] = decoded
        iterations = data.get("iterations")
        if not isinstance(iterations, int) or isinstance(iterations, bool):
            raise UnacceptableCredentialError("credential field 'iterations' is not an integer")
        return cls(mechanism=str(data.get("mechanism")), iterations=iterations, **fields)

    def __repr__(self) -> str:
        return f"ScramCredential(mechanism={self.mechanism!r}, iterations={self.iterations})"


@dataclass(frozen=True)
class _ClientFirst:
    gs2_header: str
    bare: str
    username: str
    nonce: str


@dataclass(frozen=True)
class _Expecting:
    """What the server remembers between the two steps (dropped when the exchange ends)."""

    client_first: _ClientFirst
    server_first: str
    nonce: str
    stored_key: bytes
    server_key: bytes
    #: False for an unknown user: the proof step then always fails.
    known: bool


class ScramServer:
    """The server side of one SCRAM exchange: ``step`` takes the client-first message, then
    the client-final message, and returns what to send back. Afterwards ``complete`` is True
    and ``username`` is the authenticated user; a failure raises ``AuthenticationError`` and
    any later step ``IllegalSaslStateError``. ``lookup`` returns the user's credential for this
    mechanism, or None. Not thread-safe: one connection owns it."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        *,
        nonce_factory: Callable[[], str] | None = None,
        unknown_user_secret: bytes | None = None,
    ) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism!r}")
        self.mechanism = mechanism
        self.username: str | None = None
        self._hash_name = MECHANISMS[mechanism]
        self._lookup = lookup
        self._nonce_factory = nonce_factory or _random_nonce
        self._unknown_user_secret = unknown_user_secret or _UNKNOWN_USER_SECRET
        self._expecting: _Expecting | None = None
        self._state = "first"

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def __repr__(self) -> str:
        return f"ScramServer(mechanism={self.mechanism!r}, state={self._state!r})"

    def step(self, client_message: bytes) -> bytes:
        """Handle the next client message and return the answer."""
        if self._state not in ("first", "final"):
            raise IllegalSaslStateError(
                failure_message(self.mechanism), reason="SCRAM message after the exchange ended"
            )
        try:
            if self._state == "first":
                return self._first(client_message)
            return self._final(client_message)
        except Exception:
            self._state = "failed"
            self._expecting = None
            raise

    def _fail(self, reason: str) -> AuthenticationError:
        return AuthenticationError(failure_message(self.mechanism), reason=reason)

    def _first(self, client_message: bytes) -> bytes:
        first = self._parse_client_first(client_message)
        credential = self._lookup(first.username)
        if credential is not None and credential.mechanism == self.mechanism:
            salt, iterations = credential.salt, credential.iterations
            stored_key, server_key, known = credential.stored_key, credential.server_key, True
        else:
            salt, iterations = self._unknown_user_salt(first.username), DEFAULT_ITERATIONS
            size = hashlib.new(self._hash_name).digest_size
            stored_key, server_key, known = secrets.token_bytes(size), bytes(size), False
        server_nonce = self._nonce_factory()
        if not _is_nonce(server_nonce):
            raise ValueError("nonce_factory must return 1 to 256 printable characters but ','")
        nonce = first.nonce + server_nonce
        server_first = f"r={nonce},s={_b64(salt)},i={iterations}"
        self._expecting = _Expecting(first, server_first, nonce, stored_key, server_key, known)
        self._state = "final"
        return server_first.encode("ascii")

    def _parse_client_first(self, message: bytes) -> _ClientFirst:
        text = _decode(message)
        if text is None:
            raise self._fail("client-first message too long or not UTF-8")
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise self._fail("malformed client-first message")
        flag, authzid_field, bare = parts
        if flag.startswith("p="):
            raise self._fail("channel binding is not supported")
        if flag not in ("n", "y"):
            raise self._fail("malformed gs2 header")
        authzid = ""
        if authzid_field:
            unescaped = _unescape_username(authzid_field[2:])
            if authzid_field[:2] != "a=" or not unescaped:
                raise self._fail("malformed authorization id")
            authzid = unescaped
        attributes = _attributes(bare)
        if attributes is None or len(attributes) < 2:
            raise self._fail("malformed client-first message")
        if attributes[0][0] == "m":
            raise self._fail("mandatory extension not supported")
        (name_key, saslname), (nonce_key, nonce) = attributes[:2]
        username = _unescape_username(saslname) if name_key == "n" else None
        if not username or "\x00" in username or nonce_key != "r" or not _is_nonce(nonce):
            raise self._fail("malformed client-first message")
        extensions = dict(attributes[2:])
        if extensions.get("tokenauth", "").lower() == "true":
            raise AuthenticationError(
                "Authentication failed: delegation tokens are not supported",
                reason="delegation token requested",
            )
        if authzid and authzid != username:
            raise AuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username",
                reason="authorization id differs from the user name",
            )
        return _ClientFirst(f"{flag},{authzid_field},", bare, username, nonce)

    def _unknown_user_salt(self, username: str) -> bytes:
        material = f"{self.mechanism}\x00{username}".encode()
        return hmac.digest(self._unknown_user_secret, material, "sha256")[:SALT_BYTES]

    def _final(self, client_message: bytes) -> bytes:
        expecting = self._expecting
        assert expecting is not None, "SCRAM final step without a first step"
        text = _decode(client_message)
        if text is None:
            raise self._fail("client-final message too long or not UTF-8")
        without_proof, separator, proof_text = text.rpartition(",p=")
        attributes = _attributes(without_proof) if separator else None
        if attributes is None or len(attributes) < 2:
            raise self._fail("malformed client-final message")
        (binding_key, binding_text), (nonce_key, nonce) = attributes[:2]
        if binding_key != "c" or nonce_key != "r":
            raise self._fail("malformed client-final message")
        if _unb64(binding_text) != expecting.client_first.gs2_header.encode("utf-8"):
            raise self._fail("channel binding data does not match the gs2 header")
        if nonce != expecting.nonce:
            raise self._fail("invalid nonce in the client-final message")
        proof = _unb64(proof_text)
        if proof is None or len(proof) != len(expecting.stored_key):
            raise self._fail("malformed client proof")
        auth_message = (
            f"{expecting.client_first.bare},{expecting.server_first},{without_proof}"
        ).encode()
        client_signature = _hmac(self._hash_name, expecting.stored_key, auth_message)
        client_key = _xor(proof, client_signature)
        matches = hmac.compare_digest(_hash(self._hash_name, client_key), expecting.stored_key)
        if not (matches and expecting.known):
            raise self._fail("invalid client proof")
        server_signature = _hmac(self._hash_name, expecting.server_key, auth_message)
        self.username = expecting.client_first.username
        self._expecting = None
        self._state = "complete"
        return f"v={_b64(server_signature)}".encode("ascii")


def _random_nonce() -> str:
    return secrets.token_urlsafe(24)


class ScramClient:
    """The client side of one SCRAM exchange (the SDK and tests): ``first()``, then
    ``final(server_first)``, then ``verify(server_final)``, which checks the server knew the
    credential. The password is dropped once ``final`` has used it. Not thread-safe."""

    def __init__(
        self, mechanism: str, username: str, password: str, *, nonce: str | None = None
    ) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism!r}")
        nonce = _random_nonce() if nonce is None else nonce
        if not _is_nonce(nonce):
            raise ValueError("a SCRAM nonce is 1 to 256 printable characters but ','")
        if not username or "\x00" in username:
            raise ValueError("a SCRAM user name is non-empty and has no NUL")
        username.encode("utf-8")
        _password_bytes(password)
        self.mechanism = mechanism
        self.complete = False
        self._hash_name = MECHANISMS[mechanism]
        self._nonce = nonce
        self._gs2_header = "n,,"
        self._bare = f"n={_escape_username(username)},r={nonce}"
        self._password: str | None = password
        self._server_signature: bytes | None = None

    def __repr__(self) -> str:
        return f"ScramClient(mechanism={self.mechanism!r}, complete={self.complete})"

    def _fail(self, reason: str) -> AuthenticationError:
        return AuthenticationError(f"Authentication failed: {reason}", reason=reason)

    def first(self) -> bytes:
        """The client-first message."""
        return f"{self._gs2_header}{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        """The client-final message answering ``server_first``."""
        password = self._password
        if password is None:
            raise IllegalSaslStateError("Authentication failed: final() was already called")
        self._password = None
        text = _decode(server_first)
        attributes = _attributes(text) if text is not None else None
        if text is None or attributes is None or len(attributes) < 3:
            raise self._fail("malformed SCRAM server-first message")
        (nonce_key, nonce), (salt_key, salt_text), (iterations_key, iterations_text) = attributes[
            :3
        ]
        if (nonce_key, salt_key, iterations_key) != ("r", "s", "i"):
            raise self._fail("malformed SCRAM server-first message")
        if not (nonce.startswith(self._nonce) and _is_nonce(nonce[len(self._nonce) :])):
            raise self._fail("the server nonce does not extend the client nonce")
        salt = _unb64(salt_text)
        if not salt or len(salt) > MAX_SALT_BYTES:
            raise self._fail("invalid salt in the SCRAM server-first message")
        if not (iterations_text.isascii() and iterations_text.isdigit()):
            raise self._fail("invalid iteration count in the SCRAM server-first message")
        iterations = int(iterations_text)
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise self._fail("iteration count outside Kafka's bounds")
        salted_password = _salted_password(self._hash_name, password, salt, iterations)
        client_key = _client_key(self._hash_name, salted_password)
        stored_key = _hash(self._hash_name, client_key)
        without_proof = f"c={_b64(self._gs2_header.encode())},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        proof = _xor(client_key, _hmac(self._hash_name, stored_key, auth_message))
        server_key = _server_key(self._hash_name, salted_password)
        self._server_signature = _hmac(self._hash_name, server_key, auth_message)
        return f"{without_proof},p={_b64(proof)}".encode("ascii")

    def verify(self, server_final: bytes) -> None:
        """Check the server-final message; ``AuthenticationError`` for a server error or a
        signature that does not prove the server knows the credential."""
        expected = self._server_signature
        if expected is None:
            raise IllegalSaslStateError("Authentication failed: verify() before final()")
        self._server_signature = None
        text = _decode(server_final) or ""
        first = text.split(",", 1)[0]
        if first.startswith("e="):
            raise self._fail(f"the server answered {first[2:]!r}")
        signature = _unb64(first[2:]) if first.startswith("v=") else None
        if signature is None or not hmac.compare_digest(signature, expected):
            raise self._fail("invalid server signature")
        self.complete = True
