"""An MIT Kerberos KDC for the secure local Hadoop (`integration/cluster up --secure`),
and the TLS material its HTTPS endpoints need.

Everything lives in one folder (``<work>/kdc``): the realm's configuration (krb5.conf for
clients, kdc.conf for the KDC), its database, the keytabs, the log. Nothing system-wide
is touched: the KDC and the MIT tools are pointed at these files through KRB5_CONFIG and
KRB5_KDC_PROFILE, the JVMs through -Djava.security.krb5.conf.

The realm: FLINKYARN.TEST, its KDC on 127.0.0.1:KDC_PORT (TCP only). Principals:
- one service principal per Hadoop daemon kind, `<kind>/127.0.0.1`, all in
  services.keytab (the daemons run as the one local user, as the rest of the cluster);
- the user's own principal `<user>`, in user.keytab, for `kinit -kt`.
Every keytab is readable by its owner only.

TLS: one self-signed certificate for 127.0.0.1 in a PKCS12 keystore (the NameNode's and
DataNode's HTTPS), the same certificate in a truststore, and as PEM (ca.pem) for clients
that are not Java. The stores' password is random, written only into the folder and the
cluster's ssl-*.xml.

Only the standard library; the Debian packages krb5-kdc, krb5-admin-server (kadmin.local)
and krb5-user (kinit, klist) provide the programs.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from pathlib import Path

# Standard library only (see local_hadoop).
from flinkyarn import retry

REALM = "FLINKYARN.TEST"
HOST = "127.0.0.1"
KDC_PORT = 10088
SERVICES = ("nn", "dn", "HTTP", "rm", "nm")
PROGRAMS = {"krb5kdc": "krb5-kdc", "kdb5_util": "krb5-kdc", "kadmin.local": "krb5-admin-server",
            "kinit": "krb5-user", "klist": "krb5-user", "keytool": "openjdk-17-jdk-headless"}
# Short token lifetimes, so that expiry happens inside a test (milliseconds). The
# maximum leaves a per-job application room to start on a secure cluster whose nodes
# localize the Python environment cold, one after the other (two minutes did not).
TOKEN_RENEW_INTERVAL_MS = 60 * 1000
TOKEN_MAX_LIFETIME_MS = 4 * 60 * 1000


class KdcError(RuntimeError):
    pass


def principal(service: str) -> str:
    return f"{service}/{HOST}@{REALM}"


class Kdc:
    def __init__(self, folder: Path, user: str) -> None:
        self.folder = folder
        self.user = user

    krb5_conf = property(lambda self: self.folder / "krb5.conf")
    kdc_conf = property(lambda self: self.folder / "kdc.conf")
    services_keytab = property(lambda self: self.folder / "services.keytab")
    user_keytab = property(lambda self: self.folder / "user.keytab")
    pidfile = property(lambda self: self.folder / "kdc.pid")
    log = property(lambda self: self.folder / "kdc.log")
    keystore = property(lambda self: self.folder / "keystore.p12")
    truststore = property(lambda self: self.folder / "truststore.p12")
    ca_pem = property(lambda self: self.folder / "ca.pem")
    store_password_file = property(lambda self: self.folder / "store-password")
    user_principal = property(lambda self: f"{self.user}@{REALM}")

    def env(self) -> dict[str, str]:
        return {**os.environ, "KRB5_CONFIG": str(self.krb5_conf),
                "KRB5_KDC_PROFILE": str(self.kdc_conf)}

    @property
    def store_password(self) -> str:
        return self.store_password_file.read_text().strip()

    # ------------------------------------------------------------------- set-up

    def create(self, java_home: str) -> None:
        """The realm, its principals and keytabs, the TLS stores: once (kept across
        restarts, like the NameNode's data)."""
        missing = [f"{p} ({package})" for p, package in PROGRAMS.items()
                   if shutil.which(p) is None and not (p == "keytool" and
                                                       Path(java_home, "bin", p).exists())]
        if missing:
            raise KdcError(f"--secure needs the MIT Kerberos programs: missing "
                           f"{', '.join(missing)}; integration/bootstrap --tests installs them")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.folder.chmod(0o700)
        self._write_config()
        if not (self.folder / "principal").exists():
            self._run(["kdb5_util", "create", "-s", "-r", REALM, "-P", secrets.token_urlsafe(24)])
            for service in SERVICES:
                self._kadmin(f"addprinc -randkey {principal(service)}")
            self._kadmin(f"addprinc -randkey {self.user_principal}")
            self._kadmin(f"ktadd -k {self.services_keytab} "
                         + " ".join(principal(s) for s in SERVICES))
            self._kadmin(f"ktadd -k {self.user_keytab} {self.user_principal}")
            for keytab in (self.services_keytab, self.user_keytab):
                keytab.chmod(0o600)
        if not self.truststore.exists():
            self._make_stores(java_home)

    def _write_config(self) -> None:
        self.krb5_conf.write_text(f"""[libdefaults]
  default_realm = {REALM}
  dns_lookup_realm = false
  dns_lookup_kdc = false
  dns_canonicalize_hostname = false
  rdns = false
  udp_preference_limit = 1
  forwardable = true
  ticket_lifetime = 24h
  renew_lifetime = 7d
[realms]
  {REALM} = {{
    kdc = {HOST}:{KDC_PORT}
  }}
[domain_realm]
  {HOST} = {REALM}
""")
        self.kdc_conf.write_text(f"""[kdcdefaults]
  kdc_ports = {KDC_PORT}
  kdc_tcp_ports = {KDC_PORT}
[realms]
  {REALM} = {{
    database_name = {self.folder / 'principal'}
    key_stash_file = {self.folder / 'stash'}
    acl_file = {self.folder / 'kadm5.acl'}
    max_life = 24h
    max_renewable_life = 7d
    supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
  }}
[logging]
  kdc = FILE:{self.log}
""")

    def _make_stores(self, java_home: str) -> None:
        keytool = str(Path(java_home, "bin", "keytool"))
        password = secrets.token_urlsafe(18)
        self.store_password_file.write_text(password + "\n")
        self.store_password_file.chmod(0o600)
        for path in (self.keystore, self.truststore, self.ca_pem):
            path.unlink(missing_ok=True)
        self._run([keytool, "-genkeypair", "-alias", "flinkyarn-local", "-keyalg", "RSA",
                   "-keysize", "2048", "-validity", "3650", "-dname", f"CN={HOST}",
                   "-ext", f"SAN=IP:{HOST},DNS:localhost", "-keystore", str(self.keystore),
                   "-storetype", "PKCS12", "-storepass", password, "-keypass", password])
        pem = self._run([keytool, "-exportcert", "-rfc", "-alias", "flinkyarn-local",
                         "-keystore", str(self.keystore), "-storetype", "PKCS12",
                         "-storepass", password])
        self.ca_pem.write_text(pem)
        self._run([keytool, "-importcert", "-noprompt", "-alias", "flinkyarn-local-ca",
                   "-file", str(self.ca_pem), "-keystore", str(self.truststore),
                   "-storetype", "PKCS12", "-storepass", password])
        self.keystore.chmod(0o600)

    def _kadmin(self, query: str) -> None:
        self._run(["kadmin.local", "-r", REALM, "-q", query])

    def _run(self, command: list[str]) -> str:
        result = subprocess.run(command, capture_output=True, text=True, env=self.env())
        if result.returncode != 0:
            # The command line may carry a password: name the program only.
            raise KdcError(f"{Path(command[0]).name} failed (exit {result.returncode}): "
                           f"{(result.stderr or result.stdout).strip()[-2000:]}")
        return result.stdout

    # ------------------------------------------------------------------ process

    def running_pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text().strip())
            os.kill(pid, 0)
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
            return None
        return pid if b"krb5kdc" in cmdline else None

    def start(self, timeout: float = 15.0) -> int:
        """Starts the KDC (unless it runs) and returns once it issues tickets."""
        pid = self.running_pid()
        if pid is None:
            out = open(self.folder / "kdc.out", "ab")
            process = subprocess.Popen(["krb5kdc", "-n", "-P", str(self.pidfile)],
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                       env=self.env(), start_new_session=True)
            out.close()
            pid = process.pid
            self.pidfile.write_text(f"{pid}\n")
        cache = self.folder / "probe.cc"

        def probe() -> None:
            try:
                self.kinit(cache)
            finally:
                cache.unlink(missing_ok=True)

        try:
            retry.retry(probe, retry_on=KdcError, pauses=retry.Backoff.fixed(0.3),
                        deadline=retry.Deadline(timeout))
        except retry.GaveUp as gave_up:
            raise KdcError(f"the KDC issues no ticket after {timeout:g} s: "
                           f"{gave_up.last_error}; see {self.log}") from None
        return pid

    def stop(self) -> int | None:
        pid = self.running_pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(retry.GaveUp):
                retry.poll_until(lambda: not _alive(pid), bool, pauses=retry.Backoff.fixed(0.1),
                                 deadline=retry.Deadline(5.0))
        self.pidfile.unlink(missing_ok=True)
        return pid

    def kinit(self, cache: Path, keytab: Path | None = None, name: str | None = None) -> None:
        """A ticket for `name` (default: the user) from `keytab` into the cache file."""
        self._run(["kinit", "-kt", str(keytab or self.user_keytab), "-c", f"FILE:{cache}",
                   name or self.user_principal])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
