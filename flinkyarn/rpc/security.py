"""Per-cluster TLS: a certificate authority made for each cluster, and one key pair it
signs, shared by the cluster's processes and its client. Every control-plane connection
(gRPC and REST) is mutual TLS against that authority: a process without the cluster's
files cannot register a TaskExecutor, call an endpoint, or submit a job.

The certificate names the host `flinkyarn-cluster` (callers override the TLS target name),
so the same files work on every host of a YARN cluster.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

TLS_NAME = "flinkyarn-cluster"
FILES = ("ca.pem", "cert.pem", "key.pem")


@dataclass(frozen=True)
class ClusterSecurity:
    """The PEM bytes of the cluster's authority, certificate and private key."""

    ca: bytes
    cert: bytes
    key: bytes
    directory: Path | None = None

    @classmethod
    def generate(cls, directory: Path) -> "ClusterSecurity":
        """Makes a new authority and key pair and writes them (key readable only by us)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = datetime.datetime.now(datetime.timezone.utc)
        start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=30)

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "flinkyarn cluster CA")])
        ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
                   .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .sign(ca_key, hashes.SHA256()))

        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TLS_NAME)]))
                .issuer_name(ca_name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.SubjectAlternativeName([
                    x509.DNSName(TLS_NAME), x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))

        pem = serialization.Encoding.PEM
        security = cls(
            ca=ca_cert.public_bytes(pem),
            cert=cert.public_bytes(pem),
            key=key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()),
            directory=directory)
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        for name, data in zip(FILES, (security.ca, security.cert, security.key)):
            path = directory / name
            path.write_bytes(data)
            path.chmod(0o600)
        return security

    @classmethod
    def load(cls, directory: Path) -> "ClusterSecurity":
        missing = [name for name in FILES if not (directory / name).is_file()]
        if missing:
            raise FileNotFoundError(f"cluster security files missing in {directory}: "
                                    f"{', '.join(missing)}")
        ca, cert, key = ((directory / name).read_bytes() for name in FILES)
        return cls(ca=ca, cert=cert, key=key, directory=directory)

    # gRPC

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.ca, private_key=self.key,
                                            certificate_chain=self.cert)

    # REST (aiohttp, requests)

    def server_ssl_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.verify_mode = ssl.CERT_REQUIRED
        self._load(context)
        return context

    def client_ssl_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False  # the authority is ours alone; the name is fixed
        self._load(context)
        return context

    def _load(self, context: ssl.SSLContext) -> None:
        if self.directory is None:
            raise ValueError("ssl contexts need the security files on disk")
        context.load_verify_locations(cafile=str(self.directory / "ca.pem"))
        context.load_cert_chain(str(self.directory / "cert.pem"), str(self.directory / "key.pem"))
