"""Debian's headless Chromium, for tests that check what a person sees in a browser.

Each call starts a fresh browser with a new temporary profile, lets the page run its
scripts for `wait_ms` of virtual time (time that waits for the page's network requests,
so a page polling every 2 s polls 2-3 times in a 5 s budget whatever the machine's
speed), then dumps the DOM or takes a screenshot, and quits.

Chromium is a requirement of the test tiers that use it, not an option: when it is
missing, `BrowserMissing` says to run integration/bootstrap --tests, which installs it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

# As root Chromium needs --no-sandbox. The background-networking flags stop it from
# calling Google's services, which this machine's closed network refuses.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-proxy-server", "--hide-scrollbars", "--mute-audio")


class BrowserMissing(RuntimeError):
    pass


class BrowserError(RuntimeError):
    pass


def chromium() -> str:
    """The path of the `chromium` executable."""
    path = shutil.which("chromium")
    if path is None:
        raise BrowserMissing("Chromium is not installed (no `chromium` on PATH); run "
                             "integration/bootstrap --tests, which installs Debian's "
                             "chromium package")
    return path


def dump_dom(url: str, wait_ms: int = 3000, timeout: float = 60.0) -> str:
    """The page's DOM as HTML after its scripts ran for wait_ms of virtual time."""
    return _run(url, [f"--virtual-time-budget={wait_ms}", "--dump-dom"], timeout)


def screenshot(url: str, path: Path, width: int = 1280, height: int = 900,
               wait_ms: int = 3000, timeout: float = 60.0) -> Path:
    """A PNG of the page's first width x height pixels, written to path."""
    path = Path(path).resolve()
    path.unlink(missing_ok=True)
    _run(url, [f"--virtual-time-budget={wait_ms}", f"--window-size={width},{height}",
               f"--screenshot={path}"], timeout)
    if not path.is_file():
        raise BrowserError(f"Chromium exited without writing the screenshot {path}")
    return path


def _run(url: str, args: list[str], timeout: float) -> str:
    with tempfile.TemporaryDirectory(prefix="flinkyarn-chromium-") as profile:
        command = [chromium(), *FLAGS, f"--user-data-dir={profile}", *args, url]
        # A session of its own, so that a hung browser is killed with all its helpers.
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True,
                                   cwd=profile)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise BrowserError(f"Chromium did not finish with {url} within {timeout:g} s") from None
        finally:
            _kill_leftovers(process.pid)
    if process.returncode != 0:
        raise BrowserError(f"Chromium exited with code {process.returncode} on {url}:\n"
                           + _useful_lines(stderr))
    return stdout


def _kill_leftovers(session: int) -> None:
    try:
        os.killpg(session, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _useful_lines(stderr: str, keep: int = 20) -> str:
    """stderr without the D-Bus complaints of a machine with no desktop session."""
    lines = [line for line in stderr.splitlines() if "dbus" not in line.lower()]
    return "\n".join(lines[-keep:]) or "(nothing on stderr)"
