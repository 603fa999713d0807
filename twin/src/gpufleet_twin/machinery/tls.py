"""TLS material for the twin's HTTPS endpoints: a private CA and a serving certificate.

The CA is generated per run, so a kubeconfig embeds it as
``certificate-authority-data`` and clients verify the server exactly as they
verify a real cluster (no ``insecure-skip-tls-verify``).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class TlsMaterial:
    """PEM-encoded CA certificate and key, and the server's certificate and private key.

    The CA key stays in memory: the BMCs' certificates are signed by the same
    CA, so one ``ca.crt`` lets clients verify the API server and every BMC.
    """

    ca_cert_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    ca_key_pem: bytes = b""


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    cert: Path
    key: Path


def generate_tls_material(
    hosts: tuple[str, ...] = DEFAULT_HOSTS, *, common_name: str = "gpufleet-twin", days: int = 30
) -> TlsMaterial:
    """A fresh CA and a serving certificate for ``hosts`` (IP addresses and DNS names) signed by it."""
    now = dt.datetime.now(dt.UTC)
    # Backdate a little: clients on a slightly different clock must not see a
    # certificate that is "not yet valid".
    not_before = now - dt.timedelta(minutes=5)
    not_after = now + dt.timedelta(days=days)

    ca_key, ca_cert = _new_ca(f"{common_name}-ca", not_before=not_before, not_after=not_after)
    ca_name = ca_cert.subject

    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(_subject_alt_names(hosts)), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return TlsMaterial(
        ca_cert_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=server_cert.public_bytes(serialization.Encoding.PEM),
        key_pem=server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        ca_key_pem=ca_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def generate_ca_pem(common_name: str, *, days: int = 30) -> tuple[bytes, bytes]:
    """A fresh CA as (certificate PEM, private key PEM), e.g. for BMCs run without the API server."""
    now = dt.datetime.now(dt.UTC)
    key, cert = _new_ca(common_name, not_before=now - dt.timedelta(minutes=5), not_after=now + dt.timedelta(days=days))
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _new_ca(
    common_name: str, *, not_before: dt.datetime, not_after: dt.datetime
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ca_key, ca_cert


def write_tls_files(material: TlsMaterial, directory: Path) -> TlsFiles:
    """Write ``ca.crt``, ``tls.crt`` and ``tls.key`` (mode 0600) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(ca_cert=directory / "ca.crt", cert=directory / "tls.crt", key=directory / "tls.key")
    files.ca_cert.write_bytes(material.ca_cert_pem)
    files.cert.write_bytes(material.cert_pem)
    files.key.touch(mode=0o600)
    files.key.write_bytes(material.key_pem)
    return files


def server_ssl_context(files: TlsFiles) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=str(files.cert), keyfile=str(files.key))
    return context


def _subject_alt_names(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names
