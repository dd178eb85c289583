"""flinkyarn without its `kerberos` extra (gssapi, requests-gssapi), as `pip install
flinkyarn` leaves it on a machine without a compiler or the MIT Kerberos headers: on a
secure cluster every use of a ticket is one KerberosError naming the extra, never an
ImportError. (tests/yarn/test_edge_install.py installs the base wheel for real.)"""

from __future__ import annotations

import configparser
import re
import sys
from pathlib import Path

import pytest

from flinkyarn import kerberos
from flinkyarn.configuration import Configuration

REPO = Path(__file__).resolve().parents[2]
NAMED = "pip install 'flinkyarn[kerberos]'"


@pytest.fixture
def without_the_extra(monkeypatch):
    """Python's import raises ImportError for a module that sys.modules maps to None."""
    for module in ("gssapi", "gssapi.exceptions", "requests_gssapi"):
        monkeypatch.setitem(sys.modules, module, None)


@pytest.fixture
def secure_cluster(tmp_path, monkeypatch):
    (tmp_path / "core-site.xml").write_text(
        "<configuration><property><name>hadoop.security.authentication</name>"
        "<value>kerberos</value></property></configuration>")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))


def test_a_client_command_on_a_secure_cluster_names_the_extra(without_the_extra, secure_cluster):
    with pytest.raises(kerberos.KerberosError, match=r"no Kerberos support \(.*gssapi.*\)") as raised:
        kerberos.client_login(Configuration())
    assert NAMED in str(raised.value) and "libkrb5-dev" in str(raised.value)


def test_a_keytab_login_names_the_extra(without_the_extra, tmp_path):
    keytab = tmp_path / "alice.keytab"
    keytab.write_bytes(b"\x05\x02")
    with pytest.raises(kerberos.KerberosError, match=re.escape(NAMED)):
        kerberos.login(str(keytab), "alice@EXAMPLE.COM", tmp_path / "cache")


def test_spnego_to_the_resourcemanager_names_the_extra(without_the_extra):
    """hadoop.rm_request keeps this error and says it when an RM asks for SPNEGO."""
    with pytest.raises(kerberos.KerberosError, match=r"requests_gssapi"):
        kerberos.spnego_auth()


def test_the_base_install_needs_no_kerberos_headers():
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    required = setup["options"]["install_requires"]
    extra = setup["options.extras_require"]["kerberos"]
    for name in ("gssapi", "requests-gssapi"):
        assert f"\n{name}" not in f"\n{required}", f"{name} is in the base install"
        assert f"\n{name}>" in f"\n{extra}", f"{name} is not in the kerberos extra"
