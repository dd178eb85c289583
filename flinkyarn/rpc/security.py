"""Per-cluster TLS: a certificate authority made for each cluster by its client, which
signs one certificate per process. Every connection (gRPC, REST, Flight) is mutual TLS
against that authority: a process without the cluster's files cannot register a
TaskExecutor, call an endpoint, read a partition, or submit a job.

Roles. Each certificate carries its holder's role (the subject's organizational unit):
`client` (the submitting user: REST and the Dispatcher), `appmaster` (Dispatcher,
ResourceManager, JobMasters: it may call everything), `taskexecutor` (the containers
that run user code). The client makes the authority, its own certificate and the one
certificate all TaskExecutors share; a TaskExecutor gets only that one (no authority
key, no client certificate), so the code of a task cannot act as the client or the
AppMaster: every server authorizes each call by the caller's role (flinkyarn.rpc.
service, yarn_am/rest.py).

Data-plane tickets. All TaskExecutors share one certificate, so the data plane also
wants a ticket: each job's JobMaster makes a random key, gives it to the tasks that
produce partitions and hands every consumer, in its deployment, the ticket for the
subpartitions it reads (`partition_ticket`). A TaskExecutor serves a subpartition only
against its ticket: code of another job, which never saw the key, reads nothing.

Names are checked. The AppMaster presents a certificate naming the host it binds and
advertises (`for_host`: YARN's NM_HOST in a container), issued at its start with the
authority's key, which only its files include; clients check it against the host they
dial. TaskExecutors cannot issue certificates, so theirs names TASKEXECUTOR_NAME, and
their peers check that name (and the authority) instead of the host they dial.

Lifetimes: the authority lasts `CA_LIFETIME` (a session may run for months); every
certificate it signs lasts until the authority's end.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import hmac
import ipaddress
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # cryptography is imported where it is used: most processes need none
    import grpc  # nor does a client that only speaks REST (a tenth of its start)
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

CA_FILE, CA_KEY_FILE, CERT_FILE, KEY_FILE = "ca.pem", "ca-key.pem", "cert.pem", "key.pem"
FILES = (CA_FILE, CA_KEY_FILE, CERT_FILE, KEY_FILE)
"""The client's files, made by `generate` (its own certificate and the authority's key)."""
TASKEXECUTOR_DIR = "taskexecutor"
"""The subfolder `generate` writes the TaskExecutors' files into: CA_FILE, CERT_FILE and
KEY_FILE of role taskexecutor; all that a TaskExecutor gets."""
APPMASTER_FILES = (CA_FILE, CA_KEY_FILE)
"""What an AppMaster gets: it issues its own certificate (`for_host`)."""

CLIENT, APPMASTER, TASKEXECUTOR = "client", "appmaster", "taskexecutor"
ROLES = (CLIENT, APPMASTER, TASKEXECUTOR)
TASKEXECUTOR_NAME = "taskexecutor.flinkyarn.invalid"
"""The server name in the TaskExecutors' certificate, which their peers check."""

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
        key, cert = _issue(ca_cert, ca_key, _subject("flinkyarn client", CLIENT),
                           sans=[], usages=[ExtendedKeyUsageOID.CLIENT_AUTH])
        security = cls(ca=_pem(ca_cert), cert=_pem(cert), key=_pem(key), ca_key=_pem(ca_key),
                       directory=directory)
        security._write(directory)
        te_key, te_cert = _issue(ca_cert, ca_key, _subject(TASKEXECUTOR_NAME, TASKEXECUTOR),
                                 sans=[x509.DNSName(TASKEXECUTOR_NAME)],
                                 usages=[ExtendedKeyUsageOID.SERVER_AUTH,
                                         ExtendedKeyUsageOID.CLIENT_AUTH])
        ClusterSecurity(ca=security.ca, cert=_pem(te_cert), key=_pem(te_key))._write(
            directory / TASKEXECUTOR_DIR)
        return security

    @classmethod
    def load(cls, directory: Path) -> ClusterSecurity:
        """The files in `directory`: a certificate with its key, or (an AppMaster's) the
        authority's key to issue one with `for_host`, or both (the client's)."""
        ca_key = directory / CA_KEY_FILE
        needed = (CA_FILE,) if ca_key.is_file() else (CA_FILE, CERT_FILE, KEY_FILE)
        missing = [name for name in needed if not (directory / name).is_file()]
        if missing:
            raise FileNotFoundError(f"cluster security files missing in {directory}: "
                                    f"{', '.join(missing)}")

        def read(name: str) -> bytes:
            path = directory / name
            return path.read_bytes() if path.is_file() else b""

        return cls(ca=read(CA_FILE), cert=read(CERT_FILE), key=read(KEY_FILE),
                   ca_key=ca_key.read_bytes() if ca_key.is_file() else None, directory=directory)

    def dashboard_token(self) -> str:
        """The session's token for the dashboard's one write, cancelling a job (yarn_am/
        dashboard.py): derived from the authority's key, so the client that made the
        cluster and the AppMaster know it and no TaskExecutor does. ValueError without
        that key."""
        if self.ca_key is None:
            raise ValueError("the dashboard's token needs the cluster's authority key, "
                             f"which is missing{f' in {self.directory}' if self.directory else ''}")
        return hmac.new(self.ca_key, b"flinkyarn dashboard token", hashlib.sha256).hexdigest()[:32]

    @property
    def role(self) -> str | None:
        """The role in this process's certificate."""
        return role_of(self.cert) if self.cert else None

    def for_host(self, host: str, directory: Path, aliases: Sequence[str] = (),
                 role: str = APPMASTER) -> ClusterSecurity:
        """A fresh key pair and a certificate of `role` for server and client use naming `host`
        (and `aliases`: other names the same process serves under), signed by the
        authority and valid until its end; written into `directory` (the process's own
        folder: 0700, files 0600). The result cannot issue certificates itself.
        Raises ValueError without the authority's key."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID

        if self.ca_key is None:
            source = f" in {self.directory}" if self.directory else ""
            raise ValueError(f"cannot issue a certificate for {host}: the cluster's "
                             f"{CA_KEY_FILE} is missing{source}")
        ca_cert = x509.load_pem_x509_certificate(self.ca)
        ca_key = serialization.load_pem_private_key(self.ca_key, password=None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):  # `generate` makes EC keys
            raise ValueError(f"the cluster's {CA_KEY_FILE} is not an elliptic-curve key")
        names = list(dict.fromkeys((host, *aliases)))
        # A CN is at most 64 characters; the SANs name the hosts anyway.
        subject = _subject(host if len(host) <= 64 else None, role)
        key, cert = _issue(ca_cert, ca_key, subject, sans=[_general_name(n) for n in names],
                           usages=[ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
        security = ClusterSecurity(ca=self.ca, cert=_pem(cert), key=_pem(key), directory=directory)
        security._write(directory)
        return security

    def _write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        directory.chmod(0o700)
        files = {CA_FILE: self.ca}
        if self.cert:
            files.update({CERT_FILE: self.cert, KEY_FILE: self.key})
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
        import grpc

        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Checks the server's certificate against the authority and the dialed host (or
        the name a channel option overrides it with: TASKEXECUTOR_NAME)."""
        import grpc

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


def partition_ticket(data_key: bytes, job_id: str, result_id: str, partition_number: int,
                     subpartition: int) -> bytes:
    """The permission to read subpartition `subpartition` of partition `partition_number`
    of result `result_id` of job `job_id`: an HMAC under the job's data key (see the
    module docstring). Raises ValueError without a key: nothing is readable without one."""
    if not data_key:
        raise ValueError(f"no data key for job {job_id}: its partitions are not readable")
    message = f"{job_id}/{result_id}/{partition_number}/{subpartition}".encode()
    return hmac.new(data_key, message, hashlib.sha256).digest()


def ticket_admits(data_key: bytes, ticket: bytes, job_id: str, result_id: str,
                  partition_number: int, subpartition: int) -> bool:
    """Whether `ticket` is the one `partition_ticket` makes (in constant time)."""
    return bool(data_key) and hmac.compare_digest(
        ticket, partition_ticket(data_key, job_id, result_id, partition_number, subpartition))


@functools.lru_cache(maxsize=256)
def role_of(certificate: bytes) -> str | None:
    """The role in a certificate (PEM or DER), None for a certificate without one of
    ROLES (e.g. of another cluster's older client)."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        parsed = (x509.load_pem_x509_certificate(certificate) if certificate.startswith(b"-----")
                  else x509.load_der_x509_certificate(certificate))
    except ValueError:
        return None
    units = parsed.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    role = units[0].value if units else None
    return role if isinstance(role, str) and role in ROLES else None


def _subject(common_name: str | None, role: str) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    attributes = [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role)]
    if common_name:
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _issue(ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
           subject: x509.Name, sans: list[x509.GeneralName], usages: list[x509.ObjectIdentifier]
           ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new key and a leaf certificate signed by the authority, valid until its end."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    start = max(datetime.datetime.now(datetime.timezone.utc) - CLOCK_SKEW,
                ca_cert.not_valid_before_utc)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(ca_cert.not_valid_after_utc)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   ca_key.public_key()), critical=False))
    if sans:  # without a CN the names are the certificate's identity: critical
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=not any(
            a.oid == NameOID.COMMON_NAME for a in subject))
    return key, builder.sign(ca_key, hashes.SHA256())


def _general_name(host: str) -> x509.GeneralName:
    """An IP literal as an IPAddress name (what TLS clients compare an IP with), any
    other host as a DNSName."""
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _pem(item: x509.Certificate | ec.EllipticCurvePrivateKey) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    pem = serialization.Encoding.PEM
    if isinstance(item, x509.Certificate):
        return item.public_bytes(pem)
    return item.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
