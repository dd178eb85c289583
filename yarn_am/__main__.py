"""`python -m yarn_am --security-dir DIR --work-dir DIR [--info-file F] [--client-pipe FD
[--orphan-removes DIR]] [--start-workers N] [-D k=v ...]`: an AppMaster whose
TaskExecutors are local processes (the `local` target); N of them (default 0) start with
it, the others when jobs need their slots.

A local AppMaster dies with the client that started it: the client holds the write end
of a pipe whose read end is `--client-pipe`, and when the client is gone, however it
ended (SIGKILL too), the read end sees EOF and the AppMaster shuts down as on
`flinkyarn cancel` + stop: jobs cancelled, TaskExecutors stopped. It then removes
`--orphan-removes` (the client's work dir, with its credentials), which the client
would have removed.

The AppMaster's only scratch files are its certificate, issued at its start for its
hosts (yarn_am.appmaster.appmaster_security), in its own scratch folder
(flinkyarn/scratch.py), removed when it exits. Its TMPDIR points into that folder, which
its TaskExecutors inherit as their scratch root unless io.tmp.dirs says otherwise."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import sys
from pathlib import Path

from flinkyarn.configuration import Configuration, ConfigurationError, parse_dynamic_properties
from flinkyarn.rpc.security import TASKEXECUTOR_DIR, ClusterSecurity
from flinkyarn.scratch import process_scratch
from yarn_am.appmaster import AppMaster, appmaster_security
from yarn_am.resourcemanager.local_driver import LocalProcessDriver
from yarn_am.resourcemanager.resource_manager import ResourceManagerConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m yarn_am")
    parser.add_argument("--security-dir", required=True, type=Path)
    parser.add_argument("--work-dir", required=True, type=Path)
    parser.add_argument("--info-file", type=Path)
    parser.add_argument("--client-pipe", type=int)
    parser.add_argument("--orphan-removes", type=Path)
    parser.add_argument("--start-workers", type=int, default=0)
    parser.add_argument("-D", dest="properties", action="append", default=[])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s appmaster %(name)s: %(message)s")
    try:
        properties = parse_dynamic_properties(args.properties)
        conf = Configuration.from_raw(properties)
    except ConfigurationError as error:
        logging.error("%s", error)
        return 2
    worker = ResourceManagerConfig.from_configuration(conf).worker
    driver = LocalProcessDriver(args.security_dir / TASKEXECUTOR_DIR, args.work_dir / "logs",
                                properties, start_workers=(worker,) * args.start_workers)
    with process_scratch(conf, "flinkyarn-appmaster-") as scratch:
        cluster = ClusterSecurity.load(args.security_dir)
        security = appmaster_security(conf, cluster, scratch.root / "security")
        appmaster = AppMaster(conf, security, driver, "flinkyarn (local)",
                              cancel_token=cluster.dashboard_token())
        orphaned = asyncio.run(_serve(appmaster, args.info_file, args.client_pipe))
    if orphaned and args.orphan_removes is not None:
        shutil.rmtree(args.orphan_removes, ignore_errors=True)
    return 0


async def _serve(appmaster: AppMaster, info_file: Path | None, client_pipe: int | None) -> bool:
    """Serves until shut down; whether it was because the client is gone."""
    orphaned = False
    if client_pipe is not None:
        os.set_inheritable(client_pipe, False)  # not the TaskExecutors'

        def client_gone() -> None:
            nonlocal orphaned
            asyncio.get_running_loop().remove_reader(client_pipe)
            logging.warning("the client that started this cluster is gone: shutting down")
            orphaned = True
            appmaster.shutdown()

        asyncio.get_running_loop().add_reader(client_pipe, client_gone)
    await appmaster.serve(info_file=info_file)
    return orphaned


if __name__ == "__main__":
    sys.exit(main())
