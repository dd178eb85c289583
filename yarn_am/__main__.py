"""`python -m yarn_am --security-dir DIR --work-dir DIR [--info-file F] [-D k=v ...]`:
an AppMaster whose TaskExecutors are local processes (the `local` target).

The AppMaster's only scratch files are its certificate, issued at its start for its
hosts (yarn_am.appmaster.appmaster_security), in its own scratch folder
(flinkyarn/scratch.py), removed when it exits. Its TMPDIR points into that folder, which
its TaskExecutors inherit as their scratch root unless io.tmp.dirs says otherwise."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from flinkyarn.configuration import Configuration, ConfigurationError, parse_dynamic_properties
from flinkyarn.rpc.security import ClusterSecurity
from flinkyarn.scratch import process_scratch
from yarn_am.appmaster import AppMaster, appmaster_security
from yarn_am.resourcemanager.local_driver import LocalProcessDriver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m yarn_am")
    parser.add_argument("--security-dir", required=True, type=Path)
    parser.add_argument("--work-dir", required=True, type=Path)
    parser.add_argument("--info-file", type=Path)
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
    driver = LocalProcessDriver(args.security_dir, args.work_dir / "logs", properties)
    with process_scratch(conf, "flinkyarn-appmaster-") as scratch:
        security = appmaster_security(conf, ClusterSecurity.load(args.security_dir),
                                      scratch.root / "security")
        appmaster = AppMaster(conf, security, driver, "flinkyarn (local)")
        asyncio.run(appmaster.serve(info_file=args.info_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
