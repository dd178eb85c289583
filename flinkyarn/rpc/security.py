"""Per-cluster TLS: a certificate authority made for each cluster by its client, which
signs one certificate per process. Every connection (gRPC, REST, Flight) is mutual TLS
against that authority: a process without the cluster's files cannot register a
TaskExecutor, call an endpoint, read a partition, or submit a job.

Names are checked. A server process presents a certificate naming the host it binds and
advertises (`for_host`: YARN's NM_HOST in a container), issued at its start with the
authority's key, which the cluster's files include; every client checks the server's
certificate against the host it dials. Client certificates are checked against the
authority only: whoever holds the cluster's files is a member.

Lifetimes: the authority lasts `CA_LIFETIME` (a session may run for months); every
certificate it signs lasts until the authority's end.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

CA_FILE, CA_KEY_FILE, CERT_FILE, KEY_FILE = "ca.pem", "ca-key.pem", "cert.pem", "key.pem"
FILES = (CA_FILE, CA_KEY_FILE, CERT_FILE, KEY_FILE)
"""The cluster's files, made by `generate`: what every container of the cluster gets."""

CA_LIFETIME = datetime.timedelta(days=3650)
CLOCK_SKEW = datetime.timedelta(minutes=5)  # hosts' clocks differ: valid a little earlier


@dataclass(frozen=True)
class ClusterSecurity:
    """The PEM bytes of the cluster's authority, one certificate with its private key,
    and, in a process that may issue certificates, the authority's private key.
    `directory` holds the same as files (ssl contexts load files)."""

    ca: bytes
    cert: bytes
    key: bytes
    ca_key: bytes | None = None
    directory: Path | None = None

    @classmethod
    def generate(cls, directory: Path) -> ClusterSecurity:
        """Makes a new authority and a client certificate for the submitting client and
        writes all of `FILES` into `directory` (0700, files 0600)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        start = datetime.datetime.now(datetime.timezone.utc) - CLOCK_SKEW
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "flinkyarn cluster CA")])
        ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
                   .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(start + CA_LIFETIME)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(
                       digital_signature=False, content_commitment=False, key_encipherment=False,
                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                                  critical=False)
                   .sign(ca_key, hashes.SHA256()))
        key, cert = _issue(ca_cert, ca_key, x509.Name([
            x509.NameAttribute(NameOID.COMMON_NAME, "flinkyarn client")]),
            sans=[], usages=[ExtendedKeyUsageOID.CLIENT_AUTH])
        security = cls(ca=_pem(ca_cert), cert=_pem(cert), key=_pem(key), ca_key=_pem(ca_key),
                       directory=directory)
        security._write(directory)
        return security

    @classmethod
    def load(cls, directory: Path) -> ClusterSecurity:
        """The files in `directory`; without the authority's key (a client of a cluster
        whose keys it was not given) it serves as a client only."""
        missing = [name for name in (CA_FILE, CERT_FILE, KEY_FILE)
                   if not (directory / name).is_file()]
        if missing:
            raise FileNotFoundError(f"cluster security files missing in {directory}: "
                                    f"{', '.join(missing)}")
        ca_key = directory / CA_KEY_FILE
        return cls(ca=(directory / CA_FILE).read_bytes(), cert=(directory / CERT_FILE).read_bytes(),
                   key=(directory / KEY_FILE).read_bytes(),
                   ca_key=ca_key.read_bytes() if ca_key.is_file() else None, directory=directory)

    def for_host(self, host: str, directory: Path, aliases: Sequence[str] = ()) -> ClusterSecurity:
        """A fresh key pair and a certificate for server and client use naming `host`
        (and `aliases`: other names the same process serves under), signed by the
        authority and valid until its end; written into `directory` (the process's own
        folder: 0700, files 0600). The result cannot issue certificates itself.
        Raises ValueError without the authority's key."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        if self.ca_key is None:
            source = f" in {self.directory}" if self.directory else ""
            raise ValueError(f"cannot issue a certificate for {host}: the cluster's "
                             f"{CA_KEY_FILE} is missing{source}")
        ca_cert = x509.load_pem_x509_certificate(self.ca)
        ca_key = serialization.load_pem_private_key(self.ca_key, password=None)
        names = list(dict.fromkeys((host, *aliases)))
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]
                            if len(host) <= 64 else [])  # a CN is at most 64 characters
        key, cert = _issue(ca_cert, ca_key, subject, sans=[_general_name(n) for n in names],
                           usages=[ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
        security = ClusterSecurity(ca=self.ca, cert=_pem(cert), key=_pem(key), directory=directory)
        security._write(directory)
        return security

    def _write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        directory.chmod(0o700)
        files = {CA_FILE: self.ca, CERT_FILE: self.cert, KEY_FILE: self.key}
        if self.ca_key is not None:
            files[CA_KEY_FILE] = self.ca_key
        for name, data in files.items():
            path = directory / name
            # Created 0600: the key is never readable by others, not even for a moment.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            path.chmod(0o600)

    # gRPC

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Checks the server's certificate against the authority and the dialed host."""
        return grpc.ssl_channel_credentials(root_certificates=self.ca, private_key=self.key,
                                            certificate_chain=self.cert)

    # REST (aiohttp server, urllib client)

    def server_ssl_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.verify_mode = ssl.CERT_REQUIRED
        self._load(context)
        return context

    def client_ssl_context(self) -> ssl.SSLContext:
        """Checks the server's certificate against the authority and the dialed host."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = True
        context.verify_mode = ssl.CERT_REQUIRED
        self._load(context)
        return context

    def _load(self, context: ssl.SSLContext) -> None:
        if self.directory is None:
            raise ValueError("ssl contexts need the security files on disk")
        context.load_verify_locations(cafile=str(self.directory / CA_FILE))
        context.load_cert_chain(str(self.directory / CERT_FILE), str(self.directory / KEY_FILE))


def _issue(ca_cert, ca_key, subject, sans: list, usages: list):
    """A new key and a leaf certificate signed by the authority, valid until its end."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    start = max(datetime.datetime.now(datetime.timezone.utc) - CLOCK_SKEW,
                ca_cert.not_valid_before_utc)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(ca_cert.not_valid_after_utc)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   ca_cert.public_key()), critical=False))
    if sans:  # with an empty subject the names are the certificate's identity: critical
        builder = builder.add_extension(x509.SubjectAlternativeName(sans),
                                        critical=not subject.rdns)
    return key, builder.sign(ca_key, hashes.SHA256())


def _general_name(host: str):
    """An IP literal as an IPAddress name (what TLS clients compare an IP with), any
    other host as a DNSName."""
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _pem(item) -> bytes:
    from cryptography.hazmat.primitives import serialization

    pem = serialization.Encoding.PEM
    if hasattr(item, "private_bytes"):
        return item.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    return item.public_bytes(pem)
