"""New delegation tokens from a keytab, obtained by Hadoop's own Java clients.

The AppMaster starts a small JVM for each round (Spark's jars carry Hadoop's clients and
py4j; about a second, a 128 MB heap), logs it in from the keytab and asks, as Spark's
and Flink's token providers do:
- the default filesystem for HDFS tokens (`FileSystem.addDelegationTokens`: HA
  nameservices, KMS, whatever that filesystem hands out);
- the ResourceManager for a ResourceManager token (`YarnClient.getRMDelegationToken`),
  with which a TaskExecutor's PySpark script submits its Spark application to YARN.

The tokens name YARN's ResourceManager as their renewer, so that YARN can renew them
when they go with a new application (Spark on YARN); nobody needs to renew them here,
as new ones come before they expire. When they expire is learnt from a twin of each, for
the keytab's own user, renewed once and cancelled.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from flinkyarn import hadoop, kerberos

JVM_HEAP = "-Xmx128m"


@dataclass(frozen=True)
class Obtained:
    tokens: list[kerberos.Token]
    expires: float  # seconds since the epoch: the first of them to expire unrenewed
    ends: float  # the first of their maximum dates, past which no renewal helps
    renewer: str  # who may renew them: YARN's ResourceManager


def obtain(keytab: str, principal: str, scratch: Path,
           current: list[kerberos.Token]) -> Obtained:
    """New HDFS and ResourceManager tokens for `principal`, logged in from `keytab`; each
    named (alias) as the token of its kind and service in `current`, so Java clients find
    it where they found that one. Raises KerberosError with the Java error's message, or
    OSError."""
    if not Path(keytab).is_file():
        raise kerberos.KerberosError(f"security.kerberos.login.keytab: no such file: {keytab}")
    aliases = {(t.kind, t.service): t.alias for t in current}
    with _jvm(scratch) as jvm:
        conf = jvm.org.apache.hadoop.yarn.conf.YarnConfiguration()
        ugi = jvm.org.apache.hadoop.security.UserGroupInformation
        ugi.setConfiguration(conf)
        ugi.loginUserFromKeytab(principal, keytab)
        me = ugi.getLoginUser().getShortUserName()
        renewer = jvm.org.apache.hadoop.mapred.Master.getMasterPrincipal(conf) or me
        filesystem = jvm.org.apache.hadoop.fs.FileSystem.get(conf)
        yarn = jvm.org.apache.hadoop.yarn.client.api.YarnClient.createYarnClient()
        yarn.init(conf)
        yarn.start()
        try:
            rm_service = jvm.org.apache.hadoop.yarn.client.ClientRMProxy.getRMDelegationTokenService(conf)

            def obtained_for(who: str) -> list:
                found = list(filesystem.addDelegationTokens(
                    who, jvm.org.apache.hadoop.security.Credentials()))
                rm_token = yarn.getRMDelegationToken(jvm.org.apache.hadoop.io.Text(who))
                return [*found, jvm.org.apache.hadoop.yarn.util.ConverterUtils.convertFromYarn(
                    rm_token, rm_service)]

            tokens = [_python_token(token, aliases) for token in obtained_for(renewer)]
            expiries = []
            for twin in obtained_for(me):
                expiries.append(twin.renew(conf) / 1000.0)
                twin.cancel(conf)
        finally:
            yarn.stop()
    dates = [date for date in (t.max_date() for t in tokens) if date is not None]
    ends = min(dates, default=min(expiries))
    return Obtained(tokens, min([*expiries, ends]), ends, renewer)


def _python_token(token, aliases: dict[tuple[str, str], str]) -> kerberos.Token:
    found = kerberos.Token.from_url_string(token.encodeToUrlString())
    alias = aliases.get((found.kind, found.service), found.service)
    return kerberos.Token(alias, found.identifier, found.password, found.kind, found.service)


@contextlib.contextmanager
def _jvm(scratch: Path) -> Iterator:
    """A JVM with Hadoop's clients on its class path (Spark's jars, the Hadoop
    configuration first), its gateway's `jvm` view; stopped afterwards."""
    import pyspark
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
    from py4j.protocol import Py4JJavaError

    jars = Path(pyspark.__file__).parent / "jars"
    scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
    options = [JVM_HEAP, *hadoop.LEAN_JVM.split(), f"-Djava.io.tmpdir={scratch}"]
    if os.environ.get("KRB5_CONFIG"):  # MIT's variable, which Java does not read
        options.append(f"-Djava.security.krb5.conf={os.environ['KRB5_CONFIG']}")
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    with open(scratch / "hadoop-tokens-jvm.log", "ab") as log:
        port, process = launch_gateway(
            jarpath=str(next(jars.glob("py4j-*.jar"))), java_path=str(java),
            classpath=os.pathsep.join([str(hadoop.conf_dir()), str(jars / "*")]),
            javaopts=options, die_on_exit=True, return_proc=True, redirect_stderr=log)
    # No memory management: it would tell the JVM of each Java object Python drops,
    # long after the JVM has ended.
    gateway = JavaGateway(gateway_parameters=GatewayParameters(
        port=port, enable_memory_management=False))
    try:
        yield gateway.jvm
    except Py4JJavaError as error:  # said while the JVM can still tell what it was
        raise kerberos.KerberosError(str(error.java_exception.toString())) from None
    finally:
        gateway.close()
        process.stdin.close()  # die_on_exit: the JVM ends when its input does
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
