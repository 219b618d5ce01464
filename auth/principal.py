"""Kafka principals: who a connection is, as ACLs and ``super.users`` name it. Pure: no I/O.

A principal is "Type:name", e.g. "User:alice" (Kafka's ``KafkaPrincipal``); the type is
case-sensitive and the text splits at the first ":" (a name may contain ":"). SASL/PLAIN and
SCRAM give "User:<username>"; an unauthenticated connection is ``ANONYMOUS``, "User:ANONYMOUS".

A TLS client certificate gives "User:<distinguished name>", the name Kafka's default
``ssl.principal.mapping.rules=DEFAULT`` produces: Java's ``X500Principal.getName()``, RFC 2253
text such as "CN=writeuser,OU=Unknown,O=Unknown,L=Unknown,ST=Unknown,C=Unknown". Its rules,
which ``distinguished_name`` follows:

- RDNs are written last to first (the certificate lists C first, the name CN first), joined
  by ","; the values of a multi-valued RDN are joined by "+" in their stored order.
- Only CN, C, L, ST, O, OU, STREET, DC and UID are written as keywords. Any other attribute is
  written as its OID and "#" and the hex of its DER encoding (emailAddress becomes
  "1.2.840.113549.1.9.1=#16..."). ``ssl.getpeercert()`` gives decoded text, not the encoding,
  so the string type is assumed: IA5String for emailAddress, PrintableString for the
  attributes that must be one, UTF8String otherwise (what current CAs write). A certificate
  using another type there would map to a different name than Kafka's; mapping on the CN
  avoids the question.
- In values, each of ``,=+<>#;"\\`` is escaped with "\\", NUL as "\\00", and spaces at either
  end with "\\" (Java also escapes "=" and "#" anywhere, which RFC 2253 allows).

A connection without a certificate subject is ``ANONYMOUS`` (Kafka's SSL default when the
client sends no certificate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flux.auth.errors import InvalidPrincipalError

__all__ = [
    "ANONYMOUS",
    "USER_TYPE",
    "KafkaPrincipal",
    "distinguished_name",
    "principal_from_certificate_subject",
]

USER_TYPE = "User"

#: ``ssl.SSLSocket.getpeercert()["subject"]``: RDNs, each a sequence of (attribute, value).
CertificateSubject = Sequence[Sequence[tuple[str, str]]]


@dataclass(frozen=True)
class KafkaPrincipal:
    """``principal_type:name``; both non-empty, the type without ":". Immutable."""

    principal_type: str = USER_TYPE
    name: str = ""

    def __post_init__(self) -> None:
        if not self.principal_type or ":" in self.principal_type:
            raise InvalidPrincipalError(
                f"a principal type is non-empty without ':', not {self.principal_type!r}"
            )
        if not self.name:
            raise InvalidPrincipalError("a principal name must not be empty")

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """The principal of "Type:name" (split at the first ":")."""
        principal_type, separator, name = text.partition(":")
        if not separator:
            raise InvalidPrincipalError(f"expected a principal 'Type:name', not {text!r}")
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")

# What Python's ssl module calls the attributes Java writes as RFC 2253 keywords.
_KEYWORDS = {
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

_IA5_STRING, _PRINTABLE_STRING, _UTF8_STRING = 0x16, 0x13, 0x0C

# OpenSSL's long names of other common attributes: (OID, the DER string type assumed).
_OTHER_ATTRIBUTES = {
    "emailAddress": ("1.2.840.113549.1.9.1", _IA5_STRING),
    "serialNumber": ("2.5.4.5", _PRINTABLE_STRING),
    "dnQualifier": ("2.5.4.46", _PRINTABLE_STRING),
    "jurisdictionCountryName": ("1.3.6.1.4.1.311.60.2.1.3", _PRINTABLE_STRING),
    "surname": ("2.5.4.4", _UTF8_STRING),
    "title": ("2.5.4.12", _UTF8_STRING),
    "businessCategory": ("2.5.4.15", _UTF8_STRING),
    "postalCode": ("2.5.4.17", _UTF8_STRING),
    "name": ("2.5.4.41", _UTF8_STRING),
    "givenName": ("2.5.4.42", _UTF8_STRING),
    "initials": ("2.5.4.43", _UTF8_STRING),
    "generationQualifier": ("2.5.4.44", _UTF8_STRING),
    "pseudonym": ("2.5.4.65", _UTF8_STRING),
    "organizationIdentifier": ("2.5.4.97", _UTF8_STRING),
}

_ESCAPED = ',=+<>#;"\\'


def _escape_value(value: str) -> str:
    escaped = "".join(
        "\\00" if char == "\x00" else ("\\" + char if char in _ESCAPED else char) for char in value
    )
    # Java escapes every leading and trailing space (and CR), after the escaping above.
    lead = len(escaped) - len(escaped.lstrip(" \r"))
    trail = len(escaped.rstrip(" \r"))
    return "".join(
        "\\" + char if index < lead or index >= trail else char
        for index, char in enumerate(escaped)
    )


def _der_hex(tag: int, value: str) -> str:
    data = value.encode("ascii" if tag != _UTF8_STRING else "utf-8", errors="strict")
    length = len(data)
    if length < 0x80:
        header = bytes([tag, length])
    else:
        size = length.to_bytes((length.bit_length() + 7) // 8, "big")
        header = bytes([tag, 0x80 | len(size)]) + size
    return "#" + (header + data).hex()


def _attribute(name: str, value: str) -> str:
    keyword = _KEYWORDS.get(name)
    if keyword is not None:
        return f"{keyword}={_escape_value(value)}"
    oid, tag = _OTHER_ATTRIBUTES.get(name, (name, _UTF8_STRING))
    if tag != _UTF8_STRING and not value.isascii():
        tag = _UTF8_STRING
    return f"{oid}={_der_hex(tag, value)}"


def distinguished_name(subject: CertificateSubject) -> str:
    """The RFC 2253 distinguished name Java (and so Kafka) writes for a certificate subject
    given as ``ssl.getpeercert()["subject"]``."""
    return ",".join(
        "+".join(_attribute(name, value) for name, value in rdn) for rdn in reversed(subject)
    )


def principal_from_certificate_subject(subject: CertificateSubject | None) -> KafkaPrincipal:
    """The principal of a TLS client under Kafka's DEFAULT mapping rule: "User:<DN>", or
    ``ANONYMOUS`` when there is no certificate subject."""
    if not subject:
        return ANONYMOUS
    return KafkaPrincipal(USER_TYPE, distinguished_name(subject))
