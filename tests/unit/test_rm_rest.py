"""The client of the ResourceManager's REST API (hadoop.rm_request): where yarn-site.xml
says the RMs are (yarn.http.policy, RM HA), how it finds the active one among them
(a standby answers 307 to the active, or its "This is standby RM" page), how it
authenticates, and what it says when none answers. The RMs are HTTP(S) servers of the
test's own on the loopback interface."""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from flinkyarn import hadoop, kerberos, retry


def write(directory, name, props):
    rows = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
    (directory / name).write_text(f"<configuration>{rows}</configuration>")


@pytest.fixture
def conf(tmp_path, monkeypatch):
    """A HADOOP_CONF_DIR of the test's own (simple authentication); `conf(yarn_site)`
    writes its yarn-site.xml."""
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    monkeypatch.setenv("HADOOP_USER_NAME", "alice")
    monkeypatch.setattr(hadoop, "_active_rm", {})
    write(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://nn.example:8020"})

    def yarn_site(props):
        write(tmp_path, "yarn-site.xml", props)
        return tmp_path
    return yarn_site


# ------------------------------------------------------------------ where the RMs are


def test_http_only_takes_the_webapp_address(conf):
    conf({"yarn.resourcemanager.webapp.address": "rm.example:8188"})
    assert hadoop.rm_web_addresses() == ["http://rm.example:8188"]


def test_without_a_webapp_address_the_hostname_and_default_port_say_where(conf):
    conf({"yarn.resourcemanager.hostname": "rm.example"})
    assert hadoop.rm_web_addresses() == ["http://rm.example:8088"]


def test_a_bind_address_and_references_are_resolved_as_hadoop_does(conf):
    conf({"yarn.resourcemanager.hostname": "rm.example",
          "yarn.resourcemanager.webapp.address": "${yarn.resourcemanager.hostname}:8088"})
    assert hadoop.rm_web_addresses() == ["http://rm.example:8088"]
    conf({"yarn.resourcemanager.hostname": "rm.example",
          "yarn.resourcemanager.webapp.address": "0.0.0.0:8088"})
    assert hadoop.rm_web_addresses() == ["http://rm.example:8088"]


def test_https_only_takes_the_https_address(conf):
    conf({"yarn.http.policy": "HTTPS_ONLY",
          "yarn.resourcemanager.webapp.address": "rm.example:8088",
          "yarn.resourcemanager.webapp.https.address": "rm.example:8190"})
    assert hadoop.rm_web_addresses() == ["https://rm.example:8190"]
    conf({"yarn.http.policy": "HTTPS_ONLY", "yarn.resourcemanager.hostname": "rm.example"})
    assert hadoop.rm_web_addresses() == ["https://rm.example:8090"]


def test_http_and_https_is_spoken_over_http_as_hadoop_clients_do(conf):
    conf({"yarn.http.policy": "HTTP_AND_HTTPS", "yarn.resourcemanager.hostname": "rm.example"})
    assert hadoop.rm_web_addresses() == ["http://rm.example:8088"]


def test_ha_takes_each_rm_ids_own_address(conf):
    conf({"yarn.resourcemanager.ha.enabled": "true",
          "yarn.resourcemanager.ha.rm-ids": "rm1, rm2",
          "yarn.resourcemanager.webapp.address": "ignored.example:8088",
          "yarn.resourcemanager.webapp.address.rm1": "one.example:8088",
          "yarn.resourcemanager.webapp.address.rm2": "two.example:8089",
          "yarn.resourcemanager.webapp.https.address.rm1": "one.example:8090",
          "yarn.resourcemanager.webapp.https.address.rm2": "two.example:8091"})
    assert hadoop.rm_web_addresses() == ["http://one.example:8088", "http://two.example:8089"]
    conf({"yarn.http.policy": "HTTPS_ONLY", "yarn.resourcemanager.ha.enabled": "true",
          "yarn.resourcemanager.ha.rm-ids": "rm1,rm2",
          "yarn.resourcemanager.webapp.https.address.rm1": "one.example:8090",
          "yarn.resourcemanager.webapp.https.address.rm2": "two.example:8091"})
    assert hadoop.rm_web_addresses() == ["https://one.example:8090", "https://two.example:8091"]


def test_ha_with_hostnames_only_takes_the_default_ports(conf):
    conf({"yarn.resourcemanager.ha.enabled": "true", "yarn.resourcemanager.ha.rm-ids": "a,b",
          "yarn.resourcemanager.hostname.a": "one.example",
          "yarn.resourcemanager.hostname.b": "two.example"})
    assert hadoop.rm_web_addresses() == ["http://one.example:8088", "http://two.example:8088"]
    conf({"yarn.http.policy": "HTTPS_ONLY", "yarn.resourcemanager.ha.enabled": "true",
          "yarn.resourcemanager.ha.rm-ids": "a,b",
          "yarn.resourcemanager.hostname.a": "one.example",
          "yarn.resourcemanager.hostname.b": "two.example"})
    assert hadoop.rm_web_addresses() == ["https://one.example:8090", "https://two.example:8090"]


def test_an_ha_rm_id_without_an_address_is_refused_with_the_keys(conf):
    conf({"yarn.resourcemanager.ha.enabled": "true", "yarn.resourcemanager.ha.rm-ids": "a,b",
          "yarn.resourcemanager.hostname.a": "one.example"})
    with pytest.raises(hadoop.HadoopConfigError,
                       match=r"yarn.resourcemanager.webapp.address.b nor "
                             r"yarn.resourcemanager.hostname.b"):
        hadoop.rm_web_addresses()


# ------------------------------------------------------------ RMs of the test's own


class FakeRM:
    """An RM's web server on 127.0.0.1: `active` answers JSON (what it was asked),
    `kerberos` too, but 401 Negotiate without an Authorization header, `redirect` 307 to
    `to`, `standby` Hadoop's standby page; `seen` keeps each request (method, path,
    query, body, headers). `apps` (active): the applications it knows, by id, each
    RUNNING until the `apps[id]`-th request to kill it (0: never), then KILLED."""

    def __init__(self, role: str, to: "FakeRM | None" = None, tls: ssl.SSLContext | None = None,
                 status: int = 200, apps: dict[str, int] | None = None) -> None:
        self.role, self.to, self.status, self.seen = role, to, status, []
        self.apps, self.kills = apps, dict.fromkeys(apps or {}, 0)
        rm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                parts = urlsplit(self.path)
                rm.seen.append((self.command, parts.path, parse_qs(parts.query), body,
                                dict(self.headers)))
                if rm.role == "redirect":
                    self.answer(307, b"", "text/plain", {"Location": rm.to.url + self.path})
                elif rm.role == "standby":
                    self.answer(200, b"This is standby RM. The redirect url is: /cluster",
                                "text/plain; charset=utf-8")
                elif rm.role == "kerberos" and "Authorization" not in self.headers:
                    self.answer(401, b"", "text/plain", {"WWW-Authenticate": "Negotiate"})
                elif rm.status >= 400:
                    self.answer(rm.status, json.dumps({"RemoteException": {
                        "exception": "NotFoundException",
                        "message": f"app with id: {parts.path.rsplit('/', 1)[-1]} not found"}}
                    ).encode(), "application/json")
                elif rm.apps is not None:
                    app_id = parts.path.split("/")[5]  # /ws/v1/cluster/apps/<id>[/state]
                    if self.command == "PUT":
                        rm.kills[app_id] += 1
                    ended = rm.kills[app_id] >= rm.apps[app_id] > 0
                    self.answer(200, json.dumps({"app": {"id": app_id, "state": (
                        "KILLED" if ended else "RUNNING")}}).encode(), "application/json")
                else:
                    self.answer(200, json.dumps({"method": self.command, "path": parts.path,
                                                 "body": body}).encode(), "application/json")

            do_PUT = do_GET

            def answer(self, status, data, content_type, headers=None):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_address[1]}"
        self.address = self.url.split("://", 1)[1]
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


@pytest.fixture
def rms():
    """`rms(role, ...)` starts a FakeRM; all are stopped after the test."""
    started = []

    def start(*args, **kwargs):
        started.append(FakeRM(*args, **kwargs))
        return started[-1]
    yield start
    for rm in started:
        rm.close()


def free_address() -> str:
    """An address of the loopback interface nobody listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def ha(conf, *addresses, policy="HTTP_ONLY"):
    key = ("yarn.resourcemanager.webapp.https.address" if policy == "HTTPS_ONLY"
           else "yarn.resourcemanager.webapp.address")
    ids = [f"rm{i}" for i in range(1, len(addresses) + 1)]
    conf({"yarn.http.policy": policy, "yarn.resourcemanager.ha.enabled": "true",
          "yarn.resourcemanager.ha.rm-ids": ",".join(ids),
          **{f"{key}.{i}": address for i, address in zip(ids, addresses)}})


# ------------------------------------------------------------- finding the active RM


def test_a_single_rm_is_asked_with_the_users_name(conf, rms):
    active = rms("active")
    conf({"yarn.resourcemanager.webapp.address": active.address})
    assert hadoop.rm_request("/ws/v1/cluster/apps?states=RUNNING")["path"] == "/ws/v1/cluster/apps"
    [(method, _, query, _, headers)] = active.seen
    assert method == "GET" and query == {"states": ["RUNNING"], "user.name": ["alice"]}
    assert headers["Accept"] == "application/json"


def test_a_standbys_redirect_leads_to_the_active_rm_which_is_asked_first_next_time(conf, rms):
    active = rms("active")
    standby = rms("redirect", to=active)
    ha(conf, standby.address, active.address)
    assert hadoop.rm_request("/ws/v1/cluster/scheduler")["path"] == "/ws/v1/cluster/scheduler"
    assert [len(standby.seen), len(active.seen)] == [1, 1]
    assert active.seen[0][2] == {"user.name": ["alice"]}
    assert hadoop.rm_web_address() == active.url
    hadoop.rm_request("/ws/v1/cluster/scheduler")
    assert [len(standby.seen), len(active.seen)] == [1, 2]


def test_the_active_rm_may_be_one_the_standby_names_but_the_configuration_does_not(conf, rms):
    active = rms("active")
    standby = rms("redirect", to=active)
    ha(conf, standby.address, free_address())
    assert hadoop.rm_request("/ws/v1/cluster/info")["path"] == "/ws/v1/cluster/info"


def test_a_standby_page_and_an_rm_that_is_down_are_passed_over(conf, rms):
    standby, active = rms("standby"), rms("active")
    ha(conf, free_address(), standby.address, active.address)
    assert hadoop.rm_request("/ws/v1/cluster/info")["path"] == "/ws/v1/cluster/info"
    assert [len(standby.seen), len(active.seen)] == [1, 1]


def test_a_put_reaches_the_active_rm_with_its_body(conf, rms):
    active = rms("active")
    standby = rms("redirect", to=active)
    ha(conf, standby.address, active.address)
    hadoop.kill_application("application_1_0001")
    [(method, path, _, body, headers)] = active.seen
    assert (method, path, body) == ("PUT", "/ws/v1/cluster/apps/application_1_0001/state",
                                    {"state": "KILLED"})
    assert headers["Content-Type"] == "application/json"


def test_a_kill_is_asked_again_until_the_application_ended(conf, rms):
    """The first kill is lost (a busy or failed-over RM): asked again, the second ends it."""
    rm = rms("active", apps={"application_1_0001": 2})
    conf({"yarn.resourcemanager.webapp.address": rm.address})
    report = hadoop.kill_application_until_ended("application_1_0001", timeout=30)
    assert report["state"] == "KILLED"
    assert [(method, path.rsplit("/", 1)[-1]) for method, path, *_ in rm.seen] == [
        ("GET", "application_1_0001"), ("PUT", "state"),
        ("GET", "application_1_0001"), ("PUT", "state"), ("GET", "application_1_0001")]


def test_an_application_that_will_not_end_gives_up_after_the_timeout(conf, rms):
    rm = rms("active", apps={"application_1_0001": 0})
    conf({"yarn.resourcemanager.webapp.address": rm.address})
    with pytest.raises(retry.GaveUp, match="application_1_0001 is RUNNING"):
        hadoop.kill_application_until_ended("application_1_0001", timeout=1.5)
    assert ("PUT", "/ws/v1/cluster/apps/application_1_0001/state") in [
        (method, path) for method, path, *_ in rm.seen]


def test_when_no_rm_answers_the_error_names_each_one_tried(conf, rms):
    standby = rms("standby")
    down = free_address()
    ha(conf, down, standby.address)
    with pytest.raises(hadoop.ResourceManagerError) as raised:
        hadoop.rm_request("/ws/v1/cluster/info", timeout=5)
    assert raised.value.status is None
    assert raised.value.tried == (f"http://{down}", standby.url)
    message = str(raised.value)
    assert message.startswith("no YARN ResourceManager answered GET /ws/v1/cluster/info: ")
    assert f"http://{down}: " in message and f"{standby.url}: standby" in message
    assert isinstance(raised.value, OSError)  # what the AppMaster's callers catch


def test_a_refusal_of_the_active_rm_carries_its_status_and_reason(conf, rms):
    active = rms("active", status=404)
    conf({"yarn.resourcemanager.webapp.address": active.address})
    with pytest.raises(hadoop.ResourceManagerError,
                       match=r"answered 404 to GET /ws/v1/cluster/apps/application_1_0002: "
                             r"app with id: application_1_0002 not found") as raised:
        hadoop.rm_request("/ws/v1/cluster/apps/application_1_0002")
    assert raised.value.status == 404 and raised.value.tried == (active.url,)


# ------------------------------------------------------------ authentication and TLS


class Negotiate:  # stands for requests-gssapi's HTTPSPNEGOAuth, with a ticket
    def __call__(self, request):
        request.headers["Authorization"] = "Negotiate dGlja2V0"
        return request


def no_ticket():
    raise kerberos.KerberosError("... holds no valid ticket: run `kinit`")


def secure(monkeypatch, auth):
    monkeypatch.setattr(kerberos, "security_enabled", lambda directory=None: True)
    monkeypatch.setattr(kerberos, "spnego_auth", auth)


def test_on_a_secure_cluster_an_rm_that_wants_spnego_gets_it(conf, rms, monkeypatch):
    active = rms("kerberos")
    conf({"yarn.resourcemanager.webapp.address": active.address})
    secure(monkeypatch, Negotiate)
    assert hadoop.rm_request("/ws/v1/cluster/info")["path"] == "/ws/v1/cluster/info"
    [(_, _, _, _, headers)] = active.seen
    assert headers["Authorization"] == "Negotiate dGlja2V0"


def test_without_a_ticket_an_rm_that_wants_spnego_is_refused_with_what_to_do(conf, rms,
                                                                             monkeypatch):
    active = rms("kerberos")
    conf({"yarn.resourcemanager.webapp.address": active.address})
    secure(monkeypatch, no_ticket)
    with pytest.raises(hadoop.ResourceManagerError,
                       match=r"wants Kerberos \(SPNEGO\): .*run `kinit`") as raised:
        hadoop.rm_request("/ws/v1/cluster/info")
    assert raised.value.status == 401 and raised.value.tried == (active.url,)


def test_without_a_ticket_an_rm_with_open_web_services_is_asked_as_the_user(conf, rms,
                                                                            monkeypatch):
    """A container has delegation tokens, no ticket; an RM whose web services need no
    SPNEGO (no authentication filter) still answers it, as it did before."""
    active = rms("active")
    conf({"yarn.resourcemanager.webapp.address": active.address})
    secure(monkeypatch, no_ticket)
    assert hadoop.rm_request("/ws/v1/cluster/info")["path"] == "/ws/v1/cluster/info"
    assert active.seen[0][2] == {"user.name": ["alice"]}


@pytest.fixture
def tls(tmp_path, monkeypatch):
    """(server context, truststore path) of a certificate for 127.0.0.1; the truststore
    is PKCS12, as ssl-client.xml names it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import NameOID

    monkeypatch.setenv("TMPDIR", str(tmp_path / "scratch"))  # where ca_bundle writes its PEM
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rm.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName(
                       [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    (tmp_path / "rm-cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "rm-key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "rm-cert.pem", tmp_path / "rm-key.pem")
    truststore = tmp_path / "truststore.p12"
    truststore.write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [certificate], serialization.BestAvailableEncryption(b"secret")))
    return context, truststore


def test_https_only_rms_are_checked_against_ssl_clients_truststore(conf, rms, tls):
    context, truststore = tls
    active = rms("active", tls=context)
    standby = rms("redirect", to=active, tls=context)
    directory = conf({"yarn.http.policy": "HTTPS_ONLY", "yarn.resourcemanager.ha.enabled": "true",
                      "yarn.resourcemanager.ha.rm-ids": "rm1,rm2",
                      "yarn.resourcemanager.webapp.https.address.rm1": standby.address,
                      "yarn.resourcemanager.webapp.https.address.rm2": active.address})
    write(directory, "ssl-client.xml", {"ssl.client.truststore.location": truststore,
                                        "ssl.client.truststore.password": "secret"})
    assert hadoop.rm_request("/ws/v1/cluster/info")["path"] == "/ws/v1/cluster/info"
    assert active.url.startswith("https://") and hadoop.rm_web_address() == active.url


def test_an_https_rm_the_truststore_does_not_vouch_for_is_not_asked(conf, rms, tls):
    context, _ = tls
    active = rms("active", tls=context)
    conf({"yarn.http.policy": "HTTPS_ONLY",
          "yarn.resourcemanager.webapp.https.address": active.address})
    with pytest.raises(hadoop.ResourceManagerError,
                       match=rf"{active.url}: .*CERTIFICATE_VERIFY_FAILED"):
        hadoop.rm_request("/ws/v1/cluster/info", timeout=5)
    assert active.seen == []


# ------------------------------------------------------------------- the client's view


def test_the_client_says_which_rms_it_tried_and_what_the_active_one_does_not_know(conf, rms):
    from yarn_client import yarn_cluster

    missing = rms("active", status=404)
    conf({"yarn.resourcemanager.webapp.address": missing.address})
    with pytest.raises(yarn_cluster.YarnDeploymentError,
                       match="the YARN ResourceManager knows no /ws/v1/cluster/apps/app_1"):
        yarn_cluster.application_report("app_1")
    down = free_address()
    conf({"yarn.resourcemanager.webapp.address": down})
    with pytest.raises(yarn_cluster.YarnDeploymentError,
                       match=rf"no YARN ResourceManager answered GET /ws/v1/cluster/scheduler: "
                             rf"http://{down}: .*; is HADOOP_CONF_DIR \(.*\) right\?"):
        yarn_cluster.check_request("default", {})
