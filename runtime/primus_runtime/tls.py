"""TLS for the AM's API (``am.tls``): a certificate authority of the job's own, made at submit, and
the AM's server certificate, issued by that CA when the AM starts and knows its address.

The CA's key stays where the AM runs (beside the job token, as private); executors and clients get
the CA's certificate only and verify the AM's certificate and host name against it
(``api_client.verifying_context``, standard library). This module needs ``cryptography``: the
submitting side and the AM import it, never the executor.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# A job may run for months (streaming input): its AM's certificate must outlive it, and a CA
# that dies with its job needs no expiry of its own to limit the damage of a leak.
VALIDITY = datetime.timedelta(days=3650)
# Nodes' clocks differ: a certificate issued on one is already valid on a node a little behind.
CLOCK_SKEW = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class PemPair:
    """A certificate and its private key, PEM-encoded."""

    cert: bytes
    key: bytes


def new_ca(job_name: str) -> PemPair:
    """A CA for one job's AM API (its subject names the job, for whoever reads the certificate)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Primus job {job_name} CA")])
    now = _now()
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return PemPair(cert.public_bytes(serialization.Encoding.PEM), _private_pem(key))


def server_certificate(ca: PemPair, host: str) -> PemPair:
    """A certificate for the AM's API at ``host`` (an IP address or a DNS name: the SAN clients check),
    signed by the job's CA and valid as long as it."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"the job's CA key must be an EC key (made by tls.new_ca), got {type(ca_key).__name__}")
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW).not_valid_after(ca_cert.not_valid_after_utc)
            .add_extension(x509.SubjectAlternativeName([_general_name(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return PemPair(cert.public_bytes(serialization.Encoding.PEM), _private_pem(key))


def server_context(ca: PemPair, host: str) -> ssl.SSLContext:
    """The AM's TLS context: a fresh certificate for ``host`` (see ``server_certificate``)."""
    issued = server_certificate(ca, host)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # The ssl module loads a certificate chain from files only: a private directory, gone at once.
    with tempfile.TemporaryDirectory(prefix="primus-tls-") as tmp:
        cert_file, key_file = os.path.join(tmp, "am.crt"), os.path.join(tmp, "am.key")
        for path, data in ((cert_file, issued.cert), (key_file, issued.key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        context.load_cert_chain(cert_file, key_file)
    return context


def server_context_from_files(ca_cert: Path, ca_key: Path, host: str) -> ssl.SSLContext:
    """``server_context`` from the job's CA files (where submit left them for the AM)."""
    return server_context(PemPair(ca_cert.read_bytes(), ca_key.read_bytes()), host)


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)
