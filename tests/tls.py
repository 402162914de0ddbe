"""TLS for tests: a throwaway CA with server and client certificates, and a
``redis-server`` that speaks only TLS.

The certificates are made with ``cryptography`` (already a dependency), so no
``openssl`` binary is needed. A second, unrelated CA stands for "the wrong
CA": a client that trusts it must refuse the server.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from jobmaster.embedded import RedisServerProcess
from jobmaster.errors import JobmasterError
from tests.helpers import free_port

Key = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class Certificates:
    """PEM files in one folder; ``client_*`` is signed by ``ca``, as is ``server_*``."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    wrong_ca: Path  # signed nothing we use

    def client_options(self) -> dict[str, Any]:
        """redis-py arguments of a client that trusts ``ca`` and shows its certificate."""
        return {
            "ssl_ca_certs": str(self.ca),
            "ssl_certfile": str(self.client_cert),
            "ssl_keyfile": str(self.client_key),
        }


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(folder: Path, stem: str, cert: x509.Certificate, key: Key) -> tuple[Path, Path]:
    cert_path, key_path = folder / f"{stem}.crt", folder / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def _certificate(
    subject: str, key: Key, issuer: tuple[x509.Name, Key] | None, usage: str | None
) -> x509.Certificate:
    """A one-day certificate: a CA when ``issuer`` is None, else a leaf for ``usage``."""
    now = datetime.datetime.now(datetime.timezone.utc)
    issuer_name, signing_key = issuer if issuer else (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
        # Python 3.13's default context verifies with VERIFY_X509_STRICT, which
        # refuses (as "certificate unknown") a chain without key identifiers or,
        # for a CA, without keyCertSign: RFC 5280's profile, which real CAs follow.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signing_key.public_key()),
            critical=False,
        )
    )
    if issuer is None:
        builder = builder.add_extension(
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
    if usage == "server":
        # The hostname check of the client looks here, not at the common name.
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
    elif usage == "client":
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return builder.sign(signing_key, hashes.SHA256())


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _certificate("jobmaster test CA", ca_key, None, None)
    issuer = (ca_cert.subject, ca_key)
    files: dict[str, tuple[Path, Path]] = {"ca": _write(folder, "ca", ca_cert, ca_key)}
    for usage in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        files[usage] = _write(folder, usage, _certificate(usage, key, issuer, usage), key)
    wrong_key = ec.generate_private_key(ec.SECP256R1())
    wrong = _write(folder, "wrong-ca", _certificate("another CA", wrong_key, None, None), wrong_key)
    return Certificates(
        ca=files["ca"][0],
        server_cert=files["server"][0],
        server_key=files["server"][1],
        client_cert=files["client"][0],
        client_key=files["client"][1],
        wrong_ca=wrong[0],
    )


class TLSRedisServer(RedisServerProcess):
    """A ``redis-server`` listening only on a TLS port, demanding client certificates.

    The plain port the base class would open is turned off by the later
    ``--port 0`` (redis-server keeps the last value of a repeated option).
    """

    def __init__(self, directory: Path, port: int, certs: Certificates) -> None:
        tls = [
            "--port", "0",
            "--tls-port", str(port),
            "--tls-cert-file", str(certs.server_cert),
            "--tls-key-file", str(certs.server_key),
            "--tls-ca-cert-file", str(certs.ca),
            "--tls-auth-clients", "yes",
        ]  # fmt: skip
        super().__init__(directory, port=port, appendonly=False, extra_args=tls)
        self.certs = certs

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis.from_url(self.url, **self.certs.client_options(), **kwargs)


@contextlib.contextmanager
def serving(directory: Path, certs: Certificates) -> Iterator[TLSRedisServer]:
    """A TLS-only server on a free port for the block (skipped without TLS), stopped after."""
    server = TLSRedisServer(directory, free_port(), certs)
    start_or_skip(server)
    try:
        yield server
    finally:
        server.stop()


def start_or_skip(server: TLSRedisServer) -> None:
    """Start ``server``; skip the test if this redis-server was built without TLS."""
    try:
        server.start()
    except JobmasterError as error:
        # The log tail quotes the refused option; a TLS-enabled build that fails
        # for another reason (a bad certificate) must fail the test, not skip it.
        if "tls" in str(error).lower() and _UNSUPPORTED.search(str(error)):
            pytest.skip(f"this redis-server was built without TLS: {error}")
        raise


_UNSUPPORTED = re.compile(
    r"not supported|not compiled|not built|bad directive|unknown option|build_tls", re.IGNORECASE
)
