"""The cluster's certificates: who they name, who signed them, how long they last, and
who may read their keys."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import stat

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from flinkyarn.rpc.security import (FILES, TASKEXECUTOR_DIR, TASKEXECUTOR_NAME, ClusterSecurity,
                                     role_of)

YEAR = datetime.timedelta(days=365)


def certificate(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def names(pem: bytes) -> tuple[list[str], list]:
    san = certificate(pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return san.get_values_for_type(x509.DNSName), san.get_values_for_type(x509.IPAddress)


def usages(pem: bytes) -> set:
    return set(certificate(pem).extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def cluster(tmp_path) -> ClusterSecurity:
    return ClusterSecurity.generate(tmp_path / "cluster")


def test_generate_writes_every_shipped_file_readable_by_its_owner_only(cluster, tmp_path):
    assert set(FILES) == {"ca.pem", "ca-key.pem", "cert.pem", "key.pem"}
    assert sorted(p.name for p in (tmp_path / "cluster").iterdir()) == sorted(
        [*FILES, TASKEXECUTOR_DIR])
    executors = tmp_path / "cluster" / TASKEXECUTOR_DIR
    assert sorted(p.name for p in executors.iterdir()) == ["ca.pem", "cert.pem", "key.pem"]
    for folder in (tmp_path / "cluster", executors):
        assert mode(folder) == 0o700
        for path in folder.iterdir():
            assert path.is_dir() or mode(path) == 0o600, path


def test_each_role_has_its_own_certificate_with_the_role_in_it(cluster, tmp_path):
    """The client's, the AppMaster's (issued at its start) and the TaskExecutors' (named
    for TASKEXECUTOR_NAME, with no authority key beside it)."""
    executors = ClusterSecurity.load(tmp_path / "cluster" / TASKEXECUTOR_DIR)
    appmaster = ClusterSecurity.load(tmp_path / "cluster").for_host("10.0.0.5", tmp_path / "am")
    assert (cluster.role, appmaster.role, executors.role) == ("client", "appmaster", "taskexecutor")
    assert executors.ca_key is None and executors.ca == cluster.ca
    assert names(executors.cert) == ([TASKEXECUTOR_NAME], [])
    certificate(executors.cert).verify_directly_issued_by(certificate(cluster.ca))
    assert len({cluster.key, appmaster.key, executors.key}) == 3
    assert role_of(b"not a certificate") is None


def test_the_authority_lasts_ten_years_and_the_client_certificate_as_long(cluster):
    ca = certificate(cluster.ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.not_valid_after_utc - ca.not_valid_before_utc >= 9 * YEAR
    client = certificate(cluster.cert)
    client.verify_directly_issued_by(ca)
    assert client.not_valid_after_utc == ca.not_valid_after_utc
    assert usages(cluster.cert) == {ExtendedKeyUsageOID.CLIENT_AUTH}


@pytest.mark.parametrize("host, dns, ips", [
    ("10.20.30.40", [], [ipaddress.ip_address("10.20.30.40")]),
    ("::1", [], [ipaddress.ip_address("::1")]),
    ("node-7.cluster.example.com", ["node-7.cluster.example.com"], []),
])
def test_a_process_certificate_names_its_host_and_nothing_else(cluster, tmp_path, host, dns, ips):
    own = cluster.for_host(host, tmp_path / "own")
    assert names(own.cert) == (dns, ips)
    assert own.ca == cluster.ca


def test_aliases_are_named_too_once_each(cluster, tmp_path):
    own = cluster.for_host("10.0.0.5", tmp_path / "own", aliases=["am.example.com", "10.0.0.5"])
    assert names(own.cert) == (["am.example.com"], [ipaddress.ip_address("10.0.0.5")])


def test_a_process_certificate_is_signed_by_the_authority_and_lasts_as_long(cluster, tmp_path):
    ca = certificate(cluster.ca)
    issued = cluster.for_host("10.0.0.5", tmp_path / "own")
    own = certificate(issued.cert)
    own.verify_directly_issued_by(ca)
    assert own.not_valid_after_utc == ca.not_valid_after_utc
    assert own.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc) >= 9 * YEAR
    assert own.not_valid_before_utc >= ca.not_valid_before_utc
    assert not own.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert usages(issued.cert) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}


def test_each_process_gets_a_fresh_key_pair(cluster, tmp_path):
    first = cluster.for_host("10.0.0.5", tmp_path / "first")
    second = cluster.for_host("10.0.0.5", tmp_path / "second")
    assert len({first.key, second.key, cluster.key}) == 3
    assert certificate(first.cert).serial_number != certificate(second.cert).serial_number


def test_a_process_writes_its_files_privately_and_not_the_authoritys_key(cluster, tmp_path):
    own = cluster.for_host("10.0.0.5", tmp_path / "scratch" / "security")
    assert own.directory == tmp_path / "scratch" / "security"
    assert sorted(p.name for p in own.directory.iterdir()) == ["ca.pem", "cert.pem", "key.pem"]
    assert mode(own.directory) == 0o700
    for path in own.directory.iterdir():
        assert mode(path) == 0o600, path.name
    assert ClusterSecurity.load(own.directory) == own
    assert own.ca_key is None
    with pytest.raises(ValueError, match="ca-key.pem is missing"):
        own.for_host("10.0.0.6", tmp_path / "other")


def test_the_ssl_contexts_load_a_process_certificate_and_check_names(cluster, tmp_path):
    own = cluster.for_host("10.0.0.5", tmp_path / "own")
    client = own.client_ssl_context()
    assert client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED
    assert own.server_ssl_context().verify_mode == ssl.CERT_REQUIRED


def test_without_the_authoritys_key_the_files_still_make_a_client(cluster, tmp_path):
    client_dir = tmp_path / "client"
    client_dir.mkdir()
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (client_dir / name).write_bytes((tmp_path / "cluster" / name).read_bytes())
    client = ClusterSecurity.load(client_dir)
    assert client.ca_key is None and client.cert == cluster.cert
    assert client.client_ssl_context().check_hostname
    client.channel_credentials()
    with pytest.raises(ValueError, match="cannot issue a certificate for 10.0.0.5"):
        client.for_host("10.0.0.5", tmp_path / "own")


def test_loading_needs_the_authority_and_a_key_pair(tmp_path):
    (tmp_path / "ca.pem").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="cert.pem, key.pem"):
        ClusterSecurity.load(tmp_path)


def test_the_dashboard_token_is_the_clusters_own_and_only_its_authority_holders_know_it(
        cluster, tmp_path):
    from flinkyarn.rpc.security import APPMASTER_FILES

    token = cluster.dashboard_token()
    assert len(token) == 32 and token == ClusterSecurity.load(cluster.directory).dashboard_token()
    # The AppMaster gets the authority's files (and so knows it); another cluster's differs.
    appmaster_dir = tmp_path / "am-files"
    appmaster_dir.mkdir()
    for name in APPMASTER_FILES:
        (appmaster_dir / name).write_bytes((cluster.directory / name).read_bytes())
    assert ClusterSecurity.load(appmaster_dir).dashboard_token() == token
    assert ClusterSecurity.generate(tmp_path / "other").dashboard_token() != token
    # A TaskExecutor, or a process certificate, cannot make it.
    with pytest.raises(ValueError, match="authority key"):
        ClusterSecurity.load(cluster.directory / TASKEXECUTOR_DIR).dashboard_token()
    with pytest.raises(ValueError, match="authority key"):
        cluster.for_host("127.0.0.1", tmp_path / "process").dashboard_token()
