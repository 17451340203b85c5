"""TLS for the secure port: the serving certificate and the client CA.

Serving certificate: from --tls-cert-file/--tls-private-key-file, read at start;
without them, a self-signed one (ECDSA P-256, one year) made in memory at start, as
kube-scheduler does: it is never written to disk (the PEM reaches OpenSSL through
an anonymous memory file). Clients then skip verification or pin it, as they do
for kube-scheduler's generated certificate.

Client CA: the ``client-ca-file`` key of the ConfigMap
kube-system/extension-apiserver-authentication (the apiserver publishes its own
client CA there), or --client-ca-file. Clients may present a certificate signed by
it (requested, not required). The ConfigMap is read again every minute; CA
certificates that appear are trusted from then on. One that disappears stays
trusted until a restart: OpenSSL's trust store only grows.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import os
import socket
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger("kscheduler.serving")

AUTH_CONFIGMAP_PATH = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
CLIENT_CA_KEY = "client-ca-file"
_PEM_BEGIN = "-----BEGIN CERTIFICATE-----"
_PEM_END = "-----END CERTIFICATE-----"


def self_signed_certificate(hosts: list[str], *, days: int = 365) -> tuple[bytes, bytes]:
    """(certificate PEM, private key PEM) for ``hosts`` (names and IP addresses)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    primary = hosts[0] if hosts else "localhost"
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{primary}@{int(now.timestamp())}")])
    sans: list[x509.GeneralName] = []
    for h in dict.fromkeys(hosts):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(key, hashes.SHA256())
    )
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def default_hosts(bind_address: str) -> list[str]:
    """The names a generated certificate covers: this host, localhost, loopback, and
    the bind address when it is a specific one."""
    hosts = [socket.gethostname(), "localhost", "127.0.0.1", "::1"]
    if bind_address not in ("", "0.0.0.0", "::"):
        hosts.append(bind_address)
    return hosts


@contextlib.contextmanager
def _in_memory_file(data: bytes) -> Iterator[str]:
    """A path OpenSSL can read ``data`` from: an anonymous memory file where Linux
    has them, else a private temporary file removed at once."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None and Path("/proc/self/fd").is_dir():
        fd = memfd_create("kscheduler-tls", 0)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(prefix="kscheduler-tls-")
    try:
        os.write(fd, data)
        os.close(fd)
        yield path
    finally:
        os.unlink(path)


def split_pem_certificates(text: str) -> list[str]:
    """The PEM certificate blocks in ``text``, whitespace-normalized."""
    out: list[str] = []
    rest = text
    while _PEM_BEGIN in rest:
        start = rest.index(_PEM_BEGIN)
        end = rest.find(_PEM_END, start)
        if end < 0:
            break
        body = "".join(rest[start + len(_PEM_BEGIN) : end].split())
        out.append(f"{_PEM_BEGIN}\n{body}\n{_PEM_END}\n")
        rest = rest[end + len(_PEM_END) :]
    return out


class ServingTLS:
    """The secure port's SSLContext and the client CA certificates it trusts."""

    def __init__(
        self,
        *,
        cert_file: str | None = None,
        key_file: str | None = None,
        hosts: list[str] | None = None,
    ) -> None:
        """cert_file and key_file together, or neither (a self-signed certificate
        for ``hosts``). Raises OSError or ssl.SSLError for unreadable files."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["http/1.1"])
        if cert_file and key_file:
            ctx.load_cert_chain(cert_file, key_file)
            self.self_signed = False
            self.certificate_pem = Path(cert_file).read_bytes()
        else:
            cert, key = self_signed_certificate(hosts or default_hosts(""))
            with _in_memory_file(cert + key) as path:
                ctx.load_cert_chain(path)
            self.self_signed = True
            self.certificate_pem = cert
        self.context = ctx
        self.client_cas: set[str] = set()

    def add_client_cas(self, pem: str) -> int:
        """Trust the CA certificates in ``pem`` for client certificates from now
        on; returns how many were new. Raises ssl.SSLError for a bad bundle."""
        new = [c for c in dict.fromkeys(split_pem_certificates(pem)) if c not in self.client_cas]
        if not new:
            return 0
        self.context.load_verify_locations(cadata="".join(new))
        self.client_cas.update(new)
        # request a certificate from clients (not required: tokens work without one)
        self.context.verify_mode = ssl.CERT_OPTIONAL
        return len(new)


async def follow_client_ca(
    get: Callable[[str], Awaitable[Any]],
    tls: ServingTLS,
    *,
    interval: float = 60.0,
    first: asyncio.Event | None = None,
) -> None:
    """Read the cluster's client CA into ``tls`` now and every ``interval`` seconds,
    until cancelled. A failed read is logged and tried again; ``first`` is set after
    the first attempt, whatever its outcome."""
    warned = False
    while True:
        try:
            cm = await get(AUTH_CONFIGMAP_PATH)
            pem = str(((cm or {}).get("data") or {}).get(CLIENT_CA_KEY) or "")
            if pem:
                added = tls.add_client_cas(pem)
                if added:
                    log.info("client CA loaded", certificates=added, total=len(tls.client_cas))
            elif not warned:
                warned = True
                log.warning(
                    "no client CA in the cluster: client certificates are not accepted",
                    configmap="kube-system/extension-apiserver-authentication",
                    key=CLIENT_CA_KEY,
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not warned:
                warned = True
                log.warning(
                    "cannot read the client CA; client certificates are not accepted until "
                    "it can be read",
                    configmap="kube-system/extension-apiserver-authentication",
                    error=str(exc),
                )
        if first is not None:
            first.set()
        await asyncio.sleep(interval)
