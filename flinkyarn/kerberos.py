"""Hadoop's secure mode, as flinkyarn's Python processes meet it.

- Whether the cluster is secure: `hadoop.security.authentication=kerberos` in the
  client configuration ($HADOOP_CONF_DIR/core-site.xml), as for Hadoop's own clients.
- Who we are: in a YARN container, the delegation tokens YARN localized for it (the file
  named by HADOOP_TOKEN_FILE_LOCATION, Hadoop's token storage format), or newer ones the
  AppMaster handed over (`install_tokens`: a file of our own that the variable then
  names); elsewhere the user's Kerberos ticket (the ticket cache of `kinit`, or one made
  from a keytab by `login`). HDFS (flinkyarn/hdfs.py) authenticates with either by
  itself; the ResourceManager's web services with the ticket (SPNEGO, via GSSAPI).
- Whom we trust: the web servers' certificates are checked against the truststore of
  ssl-client.xml (PKCS12), as Hadoop's Java clients check them.

A missing or expired ticket is one clear KerberosError, never a GSSAPI trace.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flinkyarn import hadoop, scratch
from flinkyarn.configuration import Configuration, user_config_file

if TYPE_CHECKING:
    import requests

TOKEN_FILE_VARIABLE = "HADOOP_TOKEN_FILE_LOCATION"
HDFS_TOKEN_KIND = "HDFS_DELEGATION_TOKEN"


class KerberosError(hadoop.HadoopConfigError):
    """No usable Kerberos identity: the message says what to do."""


# Where an AppMaster publishes what it has to say of its delegation tokens (a
# gateways.dispatcher.TokenStatus, in skein's key-value store), for the client.
TOKEN_STATUS_KEY = "flinkyarn.delegation_tokens"


def security_enabled(directory: Path | None = None) -> bool:
    properties = hadoop.site_properties("core-site.xml", directory)
    return properties.get("hadoop.security.authentication", "simple").lower() == "kerberos"


# ------------------------------------------------------------------------ tokens


@dataclass(frozen=True)
class Token:
    """One delegation token of Hadoop's Credentials."""

    alias: str
    identifier: bytes
    password: bytes
    kind: str
    service: str

    def url_string(self) -> str:
        """Hadoop's Token.encodeToUrlString: its Writable form, URL-safe base64 without
        padding."""
        data = b"".join([_vint(len(self.identifier)), self.identifier,
                         _vint(len(self.password)), self.password,
                         _text(self.kind), _text(self.service)])
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    @classmethod
    def from_url_string(cls, text: str, alias: str = "") -> "Token":
        """The inverse of url_string (what Hadoop's Java clients hand out)."""
        reader = _Reader(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        identifier = reader.take(reader.vint())
        password = reader.take(reader.vint())
        return cls(alias, identifier, password, reader.text(), reader.text())

    def max_date(self) -> float | None:
        """When the token can be renewed no more (seconds since the epoch), from its
        identifier (Hadoop's AbstractDelegationTokenIdentifier: version, owner, renewer,
        real user, issue date, max date, ...); None for another kind of identifier."""
        try:
            reader = _Reader(self.identifier)
            reader.take(1)
            for _ in range(3):
                reader.text()
            reader.vint()  # issue date
            return reader.vint() / 1000.0
        except (ValueError, UnicodeDecodeError):
            return None


def _vint(value: int) -> bytes:
    """Hadoop's WritableUtils.writeVLong."""
    if -112 <= value <= 127:
        return value.to_bytes(1, "big", signed=True)
    length = -112
    if value < 0:
        value = ~value
        length = -120
    data = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return (length - len(data)).to_bytes(1, "big", signed=True) + data


def _text(value: str) -> bytes:
    data = value.encode()
    return _vint(len(data)) + data


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, count: int) -> bytes:
        if count < 0 or self.at + count > len(self.data):
            raise ValueError("truncated token storage")
        chunk = self.data[self.at:self.at + count]
        self.at += count
        return chunk

    def vint(self) -> int:
        first = int.from_bytes(self.take(1), "big", signed=True)
        if first >= -112:
            return first
        negative = first < -120
        length = -(first + 120) if negative else -(first + 112)
        value = int.from_bytes(self.take(length), "big")
        return ~value if negative else value

    def text(self) -> str:
        return self.take(self.vint()).decode()

    def varint(self) -> int:  # protobuf's
        shift = value = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value


def read_token_storage(data: bytes) -> list[Token]:
    """The tokens of a file in Hadoop's token storage format ("HDTS", then version 0:
    Writable, or 1: protobuf)."""
    if data[:4] != b"HDTS" or len(data) < 5:
        raise ValueError("not a Hadoop token storage file (no HDTS header)")
    version, reader = data[4], _Reader(data[5:])
    tokens = []
    if version == 0:
        for _ in range(reader.vint()):
            alias = reader.text()
            identifier = reader.take(reader.vint())
            password = reader.take(reader.vint())
            tokens.append(Token(alias, identifier, password, reader.text(), reader.text()))
        return tokens
    if version == 1:
        end = reader.varint() + reader.at
        while reader.at < end:
            key = reader.varint()
            body = _Reader(reader.take(reader.varint()))
            if key >> 3 == 1:  # tokens: CredentialsKVProto {alias, token}
                tokens.append(_protobuf_token(body))
        return tokens
    raise ValueError(f"unknown Hadoop token storage version {version}")


def write_token_storage(tokens: list[Token]) -> bytes:
    """Hadoop's token storage format, version 0 (Writable): what YARN localizes as
    HADOOP_TOKEN_FILE_LOCATION and Hadoop's Java clients read."""
    data = [b"HDTS\x00", _vint(len(tokens))]
    for token in tokens:
        data += [_text(token.alias), _vint(len(token.identifier)), token.identifier,
                 _vint(len(token.password)), token.password, _text(token.kind),
                 _text(token.service)]
    data.append(_vint(0))  # no secret keys
    return b"".join(data)


def _protobuf_token(body: _Reader) -> Token:
    fields: dict[int, bytes] = {}
    token: dict[int, bytes] = {}
    while body.at < len(body.data):
        key = body.varint()
        fields[key >> 3] = body.take(body.varint())
    inner = _Reader(fields.get(2, b""))
    while inner.at < len(inner.data):
        key = inner.varint()
        token[key >> 3] = inner.take(inner.varint())
    return Token(fields.get(1, b"").decode(), token.get(1, b""), token.get(2, b""),
                 token.get(3, b"").decode(), token.get(4, b"").decode())


def install_tokens(newer: list[Token], folder: Path) -> Path:
    """Newer tokens for this process and for the processes it starts from now on: written
    (`write_token_file`) where HADOOP_TOKEN_FILE_LOCATION then names them, and HDFS
    clients made anew, which read them."""
    from flinkyarn import hdfs

    target = write_token_file(newer, folder)
    os.environ[TOKEN_FILE_VARIABLE] = str(target)
    hdfs.forget_clients()
    return target


def write_token_file(newer: list[Token], folder: Path) -> Path:
    """This process's tokens with `newer` ones, each replacing the one of its kind and
    service, written owner-only into `folder` (whole, then renamed). Returns the file."""
    by_service = {(t.kind, t.service): t for t in container_tokens()}
    by_service.update({(t.kind, t.service): t for t in newer})
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = folder / "delegation.tokens"
    partial = folder / f".delegation.tokens.{uuid.uuid4().hex}"
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(write_token_storage(list(by_service.values())))
    os.replace(partial, target)
    return target


def container_tokens() -> list[Token]:
    """The tokens of the file HADOOP_TOKEN_FILE_LOCATION names; [] outside YARN."""
    path = os.environ.get(TOKEN_FILE_VARIABLE)
    if not path:
        return []
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return []
    return list(_token_file(path, found.st_mtime_ns, found.st_size))


@functools.lru_cache(maxsize=4)
def _token_file(path: str, mtime_ns: int, size: int) -> tuple[Token, ...]:
    """The tokens of a token file, read once per version of it."""
    return tuple(read_token_storage(Path(path).read_bytes()))


# -------------------------------------------------------------------- tickets


def spnego_auth() -> requests.auth.AuthBase:
    """requests' SPNEGO authentication with this process's Kerberos ticket."""
    try:
        from requests_gssapi import OPTIONAL, HTTPSPNEGOAuth
    except ImportError as error:
        raise no_kerberos_support(error) from None

    check_ticket()
    auth: requests.auth.AuthBase = HTTPSPNEGOAuth(mutual_authentication=OPTIONAL)
    return auth


def check_ticket() -> str:
    """The principal of the valid ticket in the current cache; else KerberosError."""
    try:
        import gssapi
    except ImportError as error:
        raise no_kerberos_support(error) from None

    try:
        credentials = gssapi.Credentials(usage="initiate")
        lifetime = credentials.lifetime
        name = str(credentials.name)
    except gssapi.exceptions.GSSError as error:
        cache = os.environ.get("KRB5CCNAME", "the default ticket cache")
        raise KerberosError(
            f"the Hadoop cluster is secure (Kerberos) and {cache} holds no valid ticket "
            f"({first_line(error)}): run `kinit`, or name a keytab with -D "
            f"security.kerberos.login.keytab=... -D security.kerberos.login.principal=..."
        ) from None
    if lifetime is not None and lifetime <= 0:
        raise KerberosError(f"the Kerberos ticket of {name} has expired: run `kinit` again, "
                            f"or name a keytab with -D security.kerberos.login.keytab=...")
    return name


def client_login(conf: Configuration) -> None:
    """A client command's identity on a secure cluster (nothing on another): logged in
    from security.kerberos.login.keytab into a ticket cache of this user's own, or the
    ticket cache of kinit, checked; else one KerberosError saying what to do."""
    from flinkyarn import options

    if not security_enabled():
        return
    keytab = conf.get(options.SECURITY_KERBEROS_KEYTAB)
    if keytab:
        principal = conf.get(options.SECURITY_KERBEROS_PRINCIPAL)
        digest = hashlib.sha256(f"{keytab}\0{principal}".encode()).hexdigest()[:16]
        login(os.path.expanduser(keytab), principal, client_home() / "tickets" / f"krb5cc-{digest}")
        return
    if not conf.get(options.SECURITY_KERBEROS_USE_TICKET_CACHE):
        raise KerberosError("the Hadoop cluster is secure (Kerberos) and "
                            "security.kerberos.login.use-ticket-cache is false: name a keytab "
                            "with -D security.kerberos.login.keytab=... -D "
                            "security.kerberos.login.principal=...")
    check_ticket()


def login(keytab: str, principal: str, cache: Path) -> str:
    """A ticket for `principal` from `keytab` into the cache file `cache`, which becomes
    this process's (and its children's) KRB5CCNAME; returns the principal."""
    try:
        import gssapi
    except ImportError as error:
        raise no_kerberos_support(error) from None

    if not Path(keytab).is_file():
        raise KerberosError(f"security.kerberos.login.keytab: no such file: {keytab}")
    if not principal:
        raise KerberosError("security.kerberos.login.keytab needs "
                            "security.kerberos.login.principal")
    cache.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    name = gssapi.Name(principal, gssapi.NameType.kerberos_principal)
    try:
        credentials = gssapi.Credentials(name=name, usage="initiate", store={
            "client_keytab": keytab, "ccache": f"FILE:{cache}"})
        credentials.store(store={"ccache": f"FILE:{cache}"}, overwrite=True, set_default=True)
    except gssapi.exceptions.GSSError as error:
        raise KerberosError(f"cannot log in as {principal} from the keytab {keytab}: "
                            f"{first_line(error)}") from None
    os.chmod(cache, 0o600)
    os.environ["KRB5CCNAME"] = f"FILE:{cache}"
    return principal


def no_kerberos_support(error: ImportError) -> KerberosError:
    """What a secure cluster gets from a flinkyarn installed without its `kerberos`
    extra (gssapi, requests-gssapi: SPNEGO and the keytab login), or whose gssapi does
    not load (no libgssapi_krb5); `error` is the import's."""
    return KerberosError(
        f"the Hadoop cluster is secure (Kerberos) and this flinkyarn has no Kerberos support "
        f"({first_line(error)}): pip install 'flinkyarn[kerberos]' (it builds against the "
        f"MIT Kerberos headers: apt install libkrb5-dev / yum install krb5-devel)")


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else error.__class__.__name__


def client_home() -> Path:
    """The client's own folder (FLINKYARN_HOME, else ~/.flinkyarn): its applications'
    files, logs, tickets, truststores and its flinkyarn.yaml."""
    return user_config_file().parent


# ------------------------------------------------------------------------ TLS


def ca_bundle(directory: Path | None = None) -> str | bool:
    """A PEM file of the certificates in ssl-client.xml's truststore (PKCS12), for
    requests' `verify`; True (the system's) when no truststore is configured."""
    properties = hadoop.site_properties("ssl-client.xml", directory)
    location = properties.get("ssl.client.truststore.location")
    if not location:
        return True
    return _pem_of_truststore(location, properties.get("ssl.client.truststore.password", ""))


def _pem_of_truststore(location: str, password_text: str) -> str:
    """The truststore's certificates as a PEM file of their own: in the process's own
    temporary folder where it has one (TMPDIR: an AppMaster's or TaskExecutor's scratch,
    which YARN removes, and their children's), else in the client's ~/.flinkyarn (not the
    machine's shared temporary folder, where it would stay). Made again if its folder
    was removed meanwhile."""
    pem = _truststore_pem(location, password_text)
    own_temp = os.environ.get(scratch.TMPDIR_ENV)
    folder = Path(own_temp) if own_temp else client_home() / "truststores"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"flinkyarn-ca-{hashlib.sha256(pem).hexdigest()[:16]}.pem"
    if not target.exists():  # written whole under a name of its own, then renamed
        partial = target.with_name(f"{target.name}.{uuid.uuid4().hex}.partial")
        partial.write_bytes(pem)
        os.replace(partial, target)
    return str(target)


@functools.lru_cache(maxsize=4)
def _truststore_pem(location: str, password_text: str) -> bytes:
    """The truststore's certificates, PEM-encoded; read once per store (every WebHDFS
    filesystem asks for them)."""
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    data = Path(location).read_bytes()
    password = password_text.encode() or None
    try:
        store = pkcs12.load_pkcs12(data, password)
    except ValueError:
        raise hadoop.HadoopConfigError(
            f"ssl-client.xml: cannot read the truststore {location} (a PKCS12 store with "
            f"ssl.client.truststore.password is needed; convert a JKS one with keytool "
            f"-importkeystore)") from None
    pem = b"".join(c.certificate.public_bytes(Encoding.PEM) for c in store.additional_certs)
    if store.cert is not None:
        pem += store.cert.certificate.public_bytes(Encoding.PEM)
    return pem
