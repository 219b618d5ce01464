"""A private certificate authority for a Flux cluster (the ``cryptography`` package): a CA,
node certificates for the names and addresses nodes are reached at, and client certificates
whose subject becomes the client's principal on an ``SSL`` listener with client
authentication. Everything is returned as PEM bytes; writing files is the caller's business.

Keys are ECDSA P-256 (fast handshakes, accepted by OpenSSL, librdkafka and Java); validity is
``days`` from now.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "IssuedCertificate"]

DEFAULT_DAYS = 825


@dataclass(frozen=True)
class IssuedCertificate:
    """A certificate and its private key, PEM (the key unencrypted: protect the file)."""

    certificate_pem: bytes
    key_pem: bytes


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organization: str | None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


class CertificateAuthority:
    """A self-signed CA that issues node and client certificates."""

    def __init__(self, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        self.certificate = certificate
        self._key = key

    @classmethod
    def create(
        cls, name: str = "Flux cluster CA", *, days: int = DEFAULT_DAYS
    ) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = _name(name, None)
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(certificate, key)

    @classmethod
    def load(cls, certificate_pem: bytes, key_pem: bytes) -> CertificateAuthority:
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the CA key is not an EC key")
        return cls(x509.load_pem_x509_certificate(certificate_pem), key)

    @property
    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self._key)

    def issue_server(
        self, common_name: str, hosts: list[str], *, days: int = DEFAULT_DAYS
    ) -> IssuedCertificate:
        """A node certificate valid for ``hosts`` (DNS names and IP addresses), usable as
        both a TLS server and a TLS client (nodes call each other)."""
        alternative: list[x509.GeneralName] = []
        for host in hosts:
            try:
                alternative.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                alternative.append(x509.DNSName(host))
        return self._issue(
            _name(common_name, None),
            [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
            alternative,
            days,
        )

    def issue_client(
        self, common_name: str, *, organization: str | None = None, days: int = DEFAULT_DAYS
    ) -> IssuedCertificate:
        """A client certificate; on an SSL listener with client authentication its principal
        is ``User:CN=<common_name>[,O=<organization>]``."""
        return self._issue(
            _name(common_name, organization), [ExtendedKeyUsageOID.CLIENT_AUTH], [], days
        )

    def _issue(
        self,
        subject: x509.Name,
        usages: list[x509.ObjectIdentifier],
        alternative: list[x509.GeneralName],
        days: int,
    ) -> IssuedCertificate:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if alternative:
            builder = builder.add_extension(x509.SubjectAlternativeName(alternative), False)
        certificate = builder.sign(self._key, hashes.SHA256())
        return IssuedCertificate(
            certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key)
        )
