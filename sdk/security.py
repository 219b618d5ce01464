"""How a client secures its broker connections: ``ClientSecurity``, Kafka's client settings.

    security = ClientSecurity(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="alice",
        sasl_password=os.environ["PASSWORD"],
        ssl_cafile="ca.pem",
    )
    with Producer("broker:9093", security=security) as producer: ...
    # The same from Kafka's dotted names (a config dict, or a client properties file):
    security = ClientSecurity.from_config({"security.protocol": "SASL_SSL", ...})
    security = ClientSecurity.from_config(load_client_properties("client.properties"))

Every client (``AsyncProducer``, ``AsyncConsumer``, ``AsyncAdmin``, ``AsyncTableView``, their
sync twins, the simple clients and ``ClusterClient``) takes ``security=``: a
``ClientSecurity`` or a mapping of Kafka's dotted names. The default is ``PLAINTEXT``.

* **Protocols** (Kafka's ``security.protocol``): ``PLAINTEXT``; ``SSL`` (TLS, optionally with a
  client certificate, ``ssl_certfile`` / ``ssl_keyfile``); ``SASL_PLAINTEXT`` and ``SASL_SSL``
  (a SASL exchange on every new connection, in clear or over TLS).
* **TLS**: the server certificate is verified against ``ssl_cafile`` (PEM), or against the
  system's trusted CAs without one; ``ssl_check_hostname`` (default True, Kafka's
  ``ssl.endpoint.identification.algorithm=https``) also checks it names the host connected to.
  TLS 1.2 or newer. The context is built once per ``ClusterClient``, at construction, so a
  missing or unreadable file is a ``ConfigurationError`` before any network call.
* **SASL** mechanisms: ``PLAIN``, ``SCRAM-SHA-256`` and ``SCRAM-SHA-512``
  (``flux.sdk.connection`` runs the exchange, and re-authenticates when the broker's sessions
  expire, KIP-368).
* **Secrets**: the password is kept (a re-authentication needs it again) but never shown:
  ``repr`` prints ``'***'`` in its place, and no SDK message or log line contains it.

Decisions: SASL settings with a protocol that does not use SASL, and TLS files with one that
does not use TLS, are ``ConfigurationError`` rather than silently ignored (Kafka ignores them),
because a client that believes it authenticates and does not is the worse failure. In
``from_config``, keys under ``security.``, ``sasl.`` and ``ssl.`` that this client does not
implement are refused for the same reason (``ssl.truststore.location``, a Java keystore, would
otherwise be dropped); every other key (``bootstrap.servers``, ``acks``, ...) is ignored, so a
whole Kafka client configuration can be passed.

Thread-safety: ``ClientSecurity`` is immutable; share it freely.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigurationError

__all__ = [
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "ClientSecurity",
    "load_client_properties",
    "parse_client_properties",
]

#: Kafka's ``security.protocol`` values.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The SASL mechanisms this client speaks.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: A client properties file larger than this is refused (real ones are a few hundred bytes).
_PROPERTIES_BYTES_MAX = 1 << 20
#: A user name or password longer than this is refused (a PLAIN message of both must stay
#: under the broker's 4 KiB bound; SCRAM messages under theirs).
_CREDENTIAL_CHARS_MAX = 1024
_HIDDEN = "'***'"

# Kafka's dotted names -> ClientSecurity fields (librdkafka's ``sasl.mechanisms`` too).
_DOTTED_NAMES = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
}
# Read specially: Java's JAAS line with the user name and password, and host name checking.
_JAAS_CONFIG = "sasl.jaas.config"
_ENDPOINT_IDENTIFICATION = "ssl.endpoint.identification.algorithm"
_SECURITY_PREFIXES = ("security.", "sasl.", "ssl.")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, repr=False)
class ClientSecurity:
    """A client's security settings (see the module docstring). Construction checks them
    and raises ``ConfigurationError`` naming the setting; names are case-insensitive and
    stored upper case."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    #: PEM files; a ``pathlib.Path`` is taken too (stored as its string).
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        protocol = _upper("security_protocol", self.security_protocol)
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigurationError(
                f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, "
                f"got {self.security_protocol!r}"
            )
        object.__setattr__(self, "security_protocol", protocol)
        if self.sasl_mechanism is not None:
            mechanism = _upper("sasl_mechanism", self.sasl_mechanism)
            if mechanism not in SASL_MECHANISMS:
                raise ConfigurationError(
                    f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}, "
                    f"got {self.sasl_mechanism!r}"
                )
            object.__setattr__(self, "sasl_mechanism", mechanism)
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            value = getattr(self, name)
            if isinstance(value, os.PathLike):
                object.__setattr__(self, name, os.fspath(value))
        for name in ("sasl_username", "sasl_password", "ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                # Never echo the value: it may be the password.
                raise ConfigurationError(f"{name} must be a string (or None)")
        if not isinstance(self.ssl_check_hostname, bool):
            raise ConfigurationError("ssl_check_hostname must be True or False")
        self._check_sasl()
        self._check_tls()

    def _check_sasl(self) -> None:
        given = [
            name
            for name in ("sasl_mechanism", "sasl_username", "sasl_password")
            if getattr(self, name) is not None
        ]
        if not self.uses_sasl:
            if given:
                raise ConfigurationError(
                    f"{', '.join(given)} set, but security_protocol {self.security_protocol} "
                    "does not use SASL (use SASL_PLAINTEXT or SASL_SSL)"
                )
            return
        missing = [
            name
            for name in ("sasl_mechanism", "sasl_username", "sasl_password")
            if not getattr(self, name)
        ]
        if missing:
            raise ConfigurationError(
                f"security_protocol {self.security_protocol} needs {', '.join(missing)}"
                + (f" (one of {', '.join(SASL_MECHANISMS)})" if "sasl_mechanism" in missing else "")
            )
        assert self.sasl_username is not None and self.sasl_password is not None
        for name, value in (
            ("sasl_username", self.sasl_username),
            ("sasl_password", self.sasl_password),
        ):
            if len(value) > _CREDENTIAL_CHARS_MAX or "\x00" in value:
                raise ConfigurationError(
                    f"{name} must be at most {_CREDENTIAL_CHARS_MAX} characters, without NUL"
                )
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ConfigurationError(f"{name} must be encodable as UTF-8") from None

    def _check_tls(self) -> None:
        files = [
            name
            for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
            if getattr(self, name) is not None
        ]
        if files and not self.uses_tls:
            raise ConfigurationError(
                f"{', '.join(files)} set, but security_protocol {self.security_protocol} "
                "does not use TLS (use SSL or SASL_SSL)"
            )
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ConfigurationError("ssl_keyfile needs ssl_certfile (the client certificate)")

    # -- views ---------------------------------------------------------------------------------

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __repr__(self) -> str:
        parts = []
        for item in fields(self):
            value = getattr(self, item.name)
            if value == item.default:
                continue
            shown = _HIDDEN if item.name == "sasl_password" else repr(value)
            parts.append(f"{item.name}={shown}")
        return f"ClientSecurity({', '.join(parts)})"

    __str__ = __repr__

    def ssl_context(self) -> ssl.SSLContext | None:
        """A new TLS client context for these settings (None without TLS). Reads the files:
        ``ConfigurationError`` names the one that cannot be loaded."""
        if not self.uses_tls:
            return None
        try:
            context = ssl.create_default_context(cafile=self.ssl_cafile)
        except (OSError, ssl.SSLError) as error:
            raise ConfigurationError(
                f"ssl_cafile {self.ssl_cafile!r} cannot be loaded: {_reason(error)}"
            ) from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.ssl_check_hostname
        if self.ssl_certfile is not None:
            try:
                context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
            except (OSError, ssl.SSLError) as error:
                files = repr(self.ssl_certfile)
                if self.ssl_keyfile is not None:
                    files += f" / ssl_keyfile {self.ssl_keyfile!r}"
                raise ConfigurationError(
                    f"ssl_certfile {files} cannot be loaded: {_reason(error)}"
                ) from None
        return context

    # -- Kafka's names ---------------------------------------------------------------------

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ClientSecurity:
        """The settings a Kafka client configuration names (see the module docstring):
        ``security.protocol``, ``sasl.mechanism`` (or ``sasl.mechanisms``),
        ``sasl.username``, ``sasl.password``, ``sasl.jaas.config`` (its ``username`` and
        ``password``), ``ssl.ca.location``, ``ssl.certificate.location``,
        ``ssl.key.location`` and ``ssl.endpoint.identification.algorithm`` (``https`` or
        empty / ``none``)."""
        values: dict[str, Any] = {}
        from_jaas: dict[str, str] = {}
        unknown = []
        for key, raw in config.items():
            if not isinstance(key, str):
                raise ConfigurationError(f"client setting names must be strings, got {key!r}")
            name = key.strip().lower()
            if name in _DOTTED_NAMES:
                field_name = _DOTTED_NAMES[name]
                text = None if raw is None else str(raw)
                # A password is taken as it is: blanks may be part of it.
                if text is not None and field_name != "sasl_password":
                    text = text.strip()
                values[field_name] = text
            elif name == _JAAS_CONFIG:
                from_jaas = _read_jaas(str(raw))
            elif name == _ENDPOINT_IDENTIFICATION:
                values["ssl_check_hostname"] = _read_endpoint_identification(raw)
            elif name.startswith(_SECURITY_PREFIXES):
                unknown.append(key)
        if unknown:
            raise ConfigurationError(
                f"unsupported security settings: {', '.join(sorted(unknown))} (supported: "
                f"{', '.join(sorted([*_DOTTED_NAMES, _JAAS_CONFIG, _ENDPOINT_IDENTIFICATION]))})"
            )
        # Kafka's unset values are empty strings; sasl.username / sasl.password win over JAAS.
        values = {k: v for k, v in {**from_jaas, **values}.items() if v != ""}
        return cls(**values)

    def with_overrides(self, **changes: Any) -> ClientSecurity:
        """A copy with the settings in ``changes`` that are not None replaced."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @classmethod
    def coerce(cls, security: ClientSecurity | Mapping[str, Any] | None) -> ClientSecurity:
        """``security=`` as the clients take it: a ``ClientSecurity``, a mapping of Kafka's
        dotted names, or None (``PLAINTEXT``)."""
        if security is None:
            return cls()
        if isinstance(security, ClientSecurity):
            return security
        if isinstance(security, Mapping):
            return cls.from_config(security)
        raise ConfigurationError(
            f"security must be a ClientSecurity or a mapping of Kafka client settings, "
            f"got {type(security).__name__}"
        )


def _upper(name: str, value: Any) -> str:
    """A protocol or mechanism name, upper case (mechanisms also with ``-`` for ``_``)."""
    if not isinstance(value, str):
        raise ConfigurationError(f"{name} must be a string, got {value!r}")
    text = value.strip().upper()
    return text.replace("_", "-") if name == "sasl_mechanism" else text


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return str(error.strerror)
    return str(error)


def _read_jaas(text: str) -> dict[str, str]:
    """``username`` and ``password`` of a JAAS line such as ``...ScramLoginModule required
    username="alice" password="...";``."""
    options = {
        name.lower(): re.sub(r"\\(.)", r"\1", value) for name, value in _JAAS_OPTION.findall(text)
    }
    found = {}
    if "username" in options:
        found["sasl_username"] = options["username"]
    if "password" in options:
        found["sasl_password"] = options["password"]
    if not found:
        raise ConfigurationError(f'{_JAAS_CONFIG} names no username="..." or password="..." option')
    return found


def _read_endpoint_identification(raw: Any) -> bool:
    text = "" if raw is None else str(raw).strip().lower()
    if text == "https":
        return True
    if text in ("", "none"):
        return False
    raise ConfigurationError(f"{_ENDPOINT_IDENTIFICATION} must be 'https' or empty, got {raw!r}")


# -- properties files ---------------------------------------------------------------------------


def parse_client_properties(text: str) -> dict[str, str]:
    """``key=value`` lines of a Java properties file (Kafka's ``--command-config``): ``#`` and
    ``!`` comments, ``=``, ``:`` or blanks between key and value, a trailing backslash
    continuing a line, and the escapes ``\\t``, ``\\n``, ``\\\\``, ``\\=``, ``\\:``, ``\\uXXXX``.
    A later key wins."""
    properties: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        logical = line.lstrip()
        if not logical or logical[0] in "#!":
            continue
        while _continues(logical):
            logical = logical[:-1] + next(lines, "").lstrip()
        key, value = _split_property(logical)
        properties[key] = value
    return properties


def load_client_properties(path: str | Path) -> dict[str, str]:
    """``parse_client_properties`` of the file at ``path`` (UTF-8); ``ConfigurationError`` if
    it cannot be read."""
    try:
        with open(path, "rb") as file:
            data = file.read(_PROPERTIES_BYTES_MAX + 1)
    except OSError as error:
        raise ConfigurationError(
            f"client config {str(path)!r} cannot be read: {_reason(error)}"
        ) from None
    if len(data) > _PROPERTIES_BYTES_MAX:
        raise ConfigurationError(
            f"client config {str(path)!r} is larger than {_PROPERTIES_BYTES_MAX} bytes"
        )
    try:
        return parse_client_properties(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigurationError(f"client config {str(path)!r} is not UTF-8") from None


def _continues(line: str) -> bool:
    """Whether ``line`` ends in an odd number of backslashes (an escaped line end)."""
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _split_property(line: str) -> tuple[str, str]:
    key_chars: list[str] = []
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\" and index + 1 < len(line):
            key_chars.append(line[index : index + 2])
            index += 2
            continue
        if char in "=: \t\f":
            break
        key_chars.append(char)
        index += 1
    rest = line[index:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape("".join(key_chars)), _unescape(rest)


def _unescape(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        escaped = match.group(1)
        if escaped.startswith("u") and len(escaped) == 5:
            return chr(int(escaped[1:], 16))
        return _ESCAPES.get(escaped, escaped)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", one, text)
