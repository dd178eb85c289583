"""flinkyarn.kerberos's token formats and the AppMaster's delegation-token manager, without
a cluster (tests/yarn_secure has them against a real KDC, NameNode and YARN)."""

from __future__ import annotations

import asyncio
import os
import stat
import time

import pytest

from flinkyarn import hdfs, kerberos, options
from flinkyarn.configuration import Configuration, ConfigurationError
from flinkyarn.kerberos import Token, _text, _vint
from tests.unit.test_hadoop_conf import write
from yarn_am import delegation_tokens
from yarn_am.delegation_tokens import DelegationTokenManager


def identifier(issue_ms: int, max_ms: int, owner: str = "alice@EXAMPLE.COM") -> bytes:
    """Hadoop's AbstractDelegationTokenIdentifier, as a NameNode writes it."""
    return b"".join([b"\x00", _text(owner), _text("alice"), _text(""), _vint(issue_ms),
                     _vint(max_ms), _vint(42), _vint(7)])


def hdfs_token(max_ms: int = 1_800_000_000_000, service: str = "nn:8020", password=b"p" * 20):
    return Token(service, identifier(max_ms - 7 * 86_400_000, max_ms), password,
                 kerberos.HDFS_TOKEN_KIND, service)


@pytest.fixture(autouse=True)
def no_handed_over_tokens(monkeypatch):
    """install_tokens sets the process's token file: undone after each test (setenv
    first, so that monkeypatch removes a variable that was not there)."""
    monkeypatch.setenv(kerberos.TOKEN_FILE_VARIABLE, "")
    monkeypatch.delenv(kerberos.TOKEN_FILE_VARIABLE)


def test_token_storage_round_trips_long_fields_and_several_tokens():
    tokens = [hdfs_token(), Token("rm", b"i" * 300, b"\x00" * 200, "RM_DELEGATION_TOKEN", "rm:8032")]
    data = kerberos.write_token_storage(tokens)
    assert data.startswith(b"HDTS\x00")
    assert kerberos.read_token_storage(data) == tokens


def test_a_garbled_token_file_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="HDTS"):
        kerberos.read_token_storage(b"nonsense")
    with pytest.raises(ValueError, match="truncated"):
        kerberos.read_token_storage(kerberos.write_token_storage([hdfs_token()])[:30])


def test_url_string_round_trips_as_hadoop_encodes_it():
    token = hdfs_token()
    text = token.url_string()
    assert "=" not in text and "+" not in text and "/" not in text
    assert Token.from_url_string(text, alias=token.alias) == token


def test_max_date_comes_from_the_identifier():
    assert hdfs_token(max_ms=1_800_000_123_000).max_date() == 1_800_000_123.0
    assert Token("x", b"\x05", b"", "OTHER", "").max_date() is None


def test_installed_tokens_replace_those_of_their_kind_and_service_only(tmp_path, monkeypatch):
    old, other = hdfs_token(password=b"old"), Token("rm", b"i", b"p", "RM_DELEGATION_TOKEN", "rm:8032")
    yarn_file = tmp_path / "container_tokens"
    yarn_file.write_bytes(kerberos.write_token_storage([old, other]))
    monkeypatch.setenv(kerberos.TOKEN_FILE_VARIABLE, str(yarn_file))
    new = hdfs_token(password=b"new")

    written = kerberos.install_tokens([new], tmp_path / "tokens")

    assert os.environ[kerberos.TOKEN_FILE_VARIABLE] == str(written)
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert stat.S_IMODE(written.parent.stat().st_mode) == 0o700
    assert kerberos.read_token_storage(written.read_bytes()) == [new, other]
    assert kerberos.container_tokens() == [new, other]
    assert list(written.parent.iterdir()) == [written]  # no partial file left
    # Rewritten in place (the same name): read again, and HDFS clients made anew.
    generation = hdfs._generation
    newest = hdfs_token(password=b"newest")
    kerberos.install_tokens([newest], tmp_path / "tokens")
    assert kerberos.container_tokens() == [newest, other]
    assert hdfs._generation == generation + 1


def test_renewal_time_ratio_must_be_a_fraction():
    with pytest.raises(ConfigurationError, match="time-ratio.*between 0 and 1"):
        Configuration.from_raw({options.SECURITY_DELEGATION_TOKENS_RENEWAL_TIME_RATIO.key: "1.5"})


def manager(tmp_path, raw=None):
    published = []

    async def publish(status):
        published.append(status)

    return DelegationTokenManager(Configuration.from_raw(raw or {}), tmp_path / "tokens", publish), published


async def never(_tokens: bytes) -> None:
    raise AssertionError("nothing to hand over without a keytab")


def test_on_a_cluster_without_kerberos_the_manager_does_nothing(tmp_path, monkeypatch):
    write(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://nn:8020"})
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    tokens, published = manager(tmp_path, {options.SECURITY_KERBEROS_KEYTAB.key: "/k"})
    assert asyncio.run(tokens.start(never)) is None
    assert published == []


def test_without_a_keytab_the_manager_says_when_the_tokens_end_and_when_they_ended(
        tmp_path, monkeypatch):
    write(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://nn:8020",
                                       "hadoop.security.authentication": "kerberos"})
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    end = int((time.time() + 3600) * 1000)
    yarn_file = tmp_path / "container_tokens"
    yarn_file.write_bytes(kerberos.write_token_storage([hdfs_token(max_ms=end)]))
    monkeypatch.setenv(kerberos.TOKEN_FILE_VARIABLE, str(yarn_file))
    tokens, published = manager(tmp_path)

    delay = asyncio.run(tokens.start(never))
    assert 3590 < delay <= 3600
    [status] = published
    assert (status.renewing, status.expires, status.warning) == (False, end / 1000, True)
    assert "no keytab" in status.message and "security.kerberos.login.keytab" in status.message

    asyncio.run(tokens.run(never, 0.0))
    assert published[-1].warning and "expired at" in published[-1].message


def keytab_manager(tmp_path, monkeypatch, life: float, ratio: float):
    """On a secure cluster, with YARN's tokens ending in `life` s: (their end in ms, a
    manager with a keytab and the renewal time ratio `ratio`, what it published)."""
    write(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://nn:8020",
                                       "hadoop.security.authentication": "kerberos"})
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    end = int((time.time() + life) * 1000)
    yarn_file = tmp_path / "container_tokens"
    yarn_file.write_bytes(kerberos.write_token_storage([hdfs_token(max_ms=end)]))
    monkeypatch.setenv(kerberos.TOKEN_FILE_VARIABLE, str(yarn_file))
    keytab = tmp_path / "alice.keytab"
    keytab.write_bytes(b"not looked at yet")
    tokens, published = manager(tmp_path, {
        options.SECURITY_KERBEROS_KEYTAB.key: str(keytab),
        options.SECURITY_KERBEROS_PRINCIPAL.key: "alice@EXAMPLE.COM",
        options.SECURITY_DELEGATION_TOKENS_RENEWAL_TIME_RATIO.key: str(ratio)})
    return end, tokens, published


def test_with_a_keytab_the_first_round_waits_for_its_share_of_the_yarn_tokens_life(
        tmp_path, monkeypatch):
    """(YARN renews the application's own tokens up to their maximum lifetime: a
    per-job application that ends before pays for no round.)"""
    end, tokens, published = keytab_manager(tmp_path, monkeypatch, life=3600, ratio=0.5)

    delay = asyncio.run(tokens.start(never))
    assert 1790 < delay <= 1800
    [status] = published
    assert (status.renewing, status.expires, status.warning) == (True, end / 1000, False)
    assert "new ones from the keytab of alice@EXAMPLE.COM at" in status.message


def test_with_a_keytab_new_tokens_come_before_hdfs_native_stops_using_the_old(
        tmp_path, monkeypatch):
    """Tokens of a short life (the test cluster's: 4 minutes): the ratio's share would
    fall into their last minute, where hdfs-native passes over them and a TaskExecutor
    registering then could not read HDFS (GSS_S_NO_CRED); the round comes before."""
    _, tokens, _ = keytab_manager(tmp_path, monkeypatch, life=160, ratio=0.75)

    delay = asyncio.run(tokens.start(never))
    assert 30 < delay <= 160 - delegation_tokens.LAST_USABLE_MARGIN_S  # not 0.75 * 160
    assert delegation_tokens.LAST_USABLE_MARGIN_S > 60  # hdfs-native's last minute


def test_new_tokens_that_expire_unrenewed_within_the_margin_are_not_asked_for_at_once(
        tmp_path, monkeypatch):
    """The test cluster's tokens expire 1 minute after they are obtained unless renewed,
    and end at 4 minutes: the next round comes after the ratio's share of that minute,
    not at once (it did: a JVM of Hadoop's clients every two seconds, for as long as
    the session ran), and still 2 minutes before their end."""
    from yarn_am import hadoop_tokens

    _, tokens, published = keytab_manager(tmp_path, monkeypatch, life=3600, ratio=0.75)
    now = time.time()
    fresh = hadoop_tokens.Obtained([hdfs_token(max_ms=int((now + 240) * 1000))],
                                   expires=now + 60, ends=now + 240, renewer="rm")
    monkeypatch.setattr(tokens, "_obtain", lambda: fresh)
    handed: list[bytes] = []

    async def hand_over(storage: bytes) -> None:
        handed.append(storage)

    delay = asyncio.run(tokens._renew(hand_over))
    assert 40 < delay <= 45
    assert "the next at" in published[-1].message and len(handed) == 1
    short = hadoop_tokens.Obtained(fresh.tokens, expires=now + 200, ends=now + 200, renewer="rm")
    monkeypatch.setattr(tokens, "_obtain", lambda: short)
    assert 70 < asyncio.run(tokens._renew(hand_over)) <= 200 - delegation_tokens.LAST_USABLE_MARGIN_S


def test_a_failed_round_is_said_and_retried_after_the_backoff(tmp_path, monkeypatch):
    write(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://nn:8020",
                                       "hadoop.security.authentication": "kerberos"})
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    tokens, published = manager(tmp_path, {
        options.SECURITY_KERBEROS_KEYTAB.key: str(tmp_path / "missing.keytab"),
        options.SECURITY_KERBEROS_PRINCIPAL.key: "alice@EXAMPLE.COM",
        options.SECURITY_DELEGATION_TOKENS_RENEWAL_RETRY_BACKOFF.key: "7 s"})
    assert asyncio.run(tokens.start(never)) == 7.0
    [status] = published
    assert status.renewing and status.warning
    assert "missing.keytab" in status.message and "trying again in 7 s" in status.message


def test_a_round_that_hadoop_refuses_says_what_java_said(tmp_path, monkeypatch):
    """(A real JVM of Hadoop's clients, logging in from a keytab that is none.)"""
    write(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://nn:8020",
                                       "hadoop.security.authentication": "kerberos"})
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    keytab = tmp_path / "alice.keytab"
    keytab.write_bytes(b"not a keytab")
    tokens, published = manager(tmp_path, {
        options.SECURITY_KERBEROS_KEYTAB.key: str(keytab),
        options.SECURITY_KERBEROS_PRINCIPAL.key: "alice@EXAMPLE.COM"})
    assert asyncio.run(tokens.start(never)) == 60.0
    [status] = published
    assert status.warning
    said = ("could not obtain new delegation tokens from the keytab of alice@EXAMPLE.COM "
            "(org.apache.hadoop.security.KerberosAuthException: failure to login: for "
            f"principal: alice@EXAMPLE.COM from keytab {keytab}")
    assert status.message.startswith(said), status.message
    assert not list(tmp_path.glob("tokens/delegation.tokens"))


def test_the_token_state_of_the_tests_above_is_undone():
    """(A leaked token file would be every later test's HDFS identity.)"""
    assert kerberos.TOKEN_FILE_VARIABLE not in os.environ
