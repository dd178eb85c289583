"""The AppMaster's delegation tokens on a Kerberos-secured Hadoop.

YARN localized the tokens the client obtained at submit; the ResourceManager renews them,
but only up to their maximum lifetime (7 days by default). After that nothing of the
application can read or write HDFS. So, as Flink's DelegationTokenManager and Spark's
HadoopDelegationTokenManager do:

- With a keytab (security.kerberos.login.keytab, shipped owner-only to the AppMaster
  alone, per-job or session), the AppMaster logs in from it and obtains new HDFS and
  ResourceManager tokens (hadoop_tokens) after `renewal.time-ratio` of the application's
  own tokens' life (YARN renews those up to their maximum lifetime), and again after
  that share of each new set's validity, but two minutes before a set's end at the
  latest (LAST_USABLE_MARGIN_S: hdfs-native drops a token a minute before); each new
  set is used by the AppMaster, and handed to every TaskExecutor, running or
  registering later (ResourceManager). A YARN application that
  a task submits (a PySpark script's Spark on YARN) gets a set of its own.
- Without one, the application lives as long as its tokens: said at start (the client
  prints it for a session), and again when they have run out.

What the manager has to say is one TokenStatus: in skein's key-value store for the client
(`session start` prints a warning), in the cluster overview (`flinkyarn list`, the
dashboard) and in the AppMaster's log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Awaitable, Callable

from flinkyarn import kerberos, options
from flinkyarn.configuration import Configuration
from flinkyarn.gateways.dispatcher import TokenStatus as Status
from yarn_am import hadoop_tokens

log = logging.getLogger(__name__)


# hdfs-native passes over a delegation token in the last 60 s before its maximum date
# (security/user.rs, get_token) and falls back to Kerberos, which a container has not: a
# process holding only such a token fails every HDFS call with GSS_S_NO_CRED. New tokens
# come this long before the old ones' end at the latest, whatever the time ratio says.
LAST_USABLE_MARGIN_S = 120.0


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(epoch))


def _due_in(ratio: float, expiry: float, end: float) -> float:
    """Seconds until new tokens are due for ones that expire at `expiry` unrenewed and
    whose maximum date is `end`: after `ratio` of what is left until `expiry`, and
    LAST_USABLE_MARGIN_S before `end` at the latest (hdfs-native's rule is on the maximum
    date: against a renewal interval shorter than the margin, it would ask at once, again
    and again)."""
    now = time.time()
    return max(0.0, min(ratio * (expiry - now), end - LAST_USABLE_MARGIN_S - now))


class DelegationTokenManager:
    def __init__(self, conf: Configuration, folder: Path,
                 publish: Callable[[Status], Awaitable[None]]) -> None:
        keytab = conf.get(options.SECURITY_KERBEROS_KEYTAB)
        self.keytab = str(Path(keytab).resolve()) if keytab else ""
        self.principal = conf.get(options.SECURITY_KERBEROS_PRINCIPAL)
        self.renewing = bool(self.keytab) and conf.get(options.SECURITY_DELEGATION_TOKENS_ENABLED)
        self.ratio = conf.get(options.SECURITY_DELEGATION_TOKENS_RENEWAL_TIME_RATIO)
        self.backoff = conf.get(options.SECURITY_DELEGATION_TOKENS_RENEWAL_RETRY_BACKOFF)
        self.folder = folder
        self.publish = publish
        self.status: Status | None = None

    async def start(self, hand_over: Callable[[bytes], Awaitable[None]]) -> float | None:
        """Before the AppMaster serves: when the application's own tokens (from YARN,
        which renews them up to their maximum lifetime) run out, and with a keytab when
        new ones are due (at once if that cannot be told). Returns the delay until `run`
        has work."""
        if not kerberos.security_enabled():
            return None
        dates = (t.max_date() for t in kerberos.container_tokens()
                 if t.kind == kerberos.HDFS_TOKEN_KIND)
        expiry = min((date for date in dates if date is not None), default=None)
        if self.renewing:
            if expiry is None:
                return await self._renew(hand_over)
            delay = _due_in(self.ratio, expiry, expiry)  # YARN renews them up to then
            message = (f"this application's delegation tokens serve until {_when(expiry)}; new "
                       f"ones from the keytab of {self.principal} at {_when(time.time() + delay)}")
            await self._say(Status(True, expiry, message), logging.INFO)
            return delay
        if expiry is None:
            return None
        message = (f"no keytab: this application's delegation tokens cannot be renewed past "
                   f"{_when(expiry)}; after that it cannot read or write HDFS. To outlive "
                   f"them, start it with -D {options.SECURITY_KERBEROS_KEYTAB.key}=... -D "
                   f"{options.SECURITY_KERBEROS_PRINCIPAL.key}=...")
        await self._say(Status(False, expiry, message, warning=True), logging.WARNING)
        return max(0.0, expiry - time.time())

    async def run(self, hand_over: Callable[[bytes], Awaitable[None]],
                  delay: float | None) -> None:
        """Until cancelled: new tokens whenever due; without a keytab, one last word
        when the tokens have run out."""
        if delay is None:
            return
        if not self.renewing:
            await asyncio.sleep(delay)
            # start() returned a delay: it said when the tokens expire.
            assert self.status is not None and self.status.expires is not None
            expired = self.status.expires
            message = (f"the delegation tokens of this application expired at {_when(expired)}: "
                       f"it can no longer read or write HDFS; stop it and start a new one, "
                       f"with -D {options.SECURITY_KERBEROS_KEYTAB.key}=... to outlive its tokens")
            await self._say(Status(False, expired, message, warning=True), logging.ERROR)
            return
        while True:
            await asyncio.sleep(delay)
            delay = await self._renew(hand_over)

    async def _renew(self, hand_over: Callable[[bytes], Awaitable[None]]) -> float:
        """One round: log in, obtain, use, hand over; the delay until the next."""
        try:
            obtained = await asyncio.to_thread(self._obtain)
        except Exception as error:  # the tokens in use still serve until they expire
            expires = self.status.expires if self.status else None
            message = (f"could not obtain new delegation tokens from the keytab of "
                       f"{self.principal} ({kerberos.first_line(error)}); trying again in "
                       f"{self.backoff:g} s")
            await self._say(Status(True, expires, message, warning=True), logging.WARNING)
            return self.backoff
        tokens, expiry = obtained.tokens, obtained.expires
        kerberos.install_tokens(tokens, self.folder)
        await hand_over(kerberos.write_token_storage(tokens))
        delay = max(1.0, _due_in(self.ratio, expiry, obtained.ends))
        message = (f"delegation tokens obtained from the keytab of {self.principal} "
                   f"({', '.join(t.kind for t in tokens)}, renewer {obtained.renewer}), "
                   f"valid until {_when(expiry)}; the next at {_when(time.time() + delay)}")
        await self._say(Status(True, expiry, message), logging.INFO)
        return delay

    async def for_application(self, purpose: str) -> bytes:
        """A set of new tokens of its own for a YARN application a task submits (Spark on
        YARN), in Hadoop's token storage format; empty without a keytab, where the
        application's tokens from YARN serve. YARN cancels an application's tokens when
        it ends: shared, the tokens every process of this one uses would die with it."""
        if not self.renewing:
            return b""
        tokens = (await asyncio.to_thread(self._obtain)).tokens
        log.info("delegation tokens obtained for %s: %s", purpose,
                 ", ".join(t.kind for t in tokens))
        return kerberos.write_token_storage(tokens)

    def _obtain(self) -> hadoop_tokens.Obtained:
        """New HDFS and ResourceManager tokens."""
        return hadoop_tokens.obtain(self.keytab, self.principal, self.folder / "jvm",
                                    kerberos.container_tokens())

    async def _say(self, status: Status, level: int) -> None:
        self.status = status
        log.log(level, "%s", status.message)
        await self.publish(status)
