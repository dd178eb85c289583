"""HDFS throughput of the client flinkyarn uses (issue 42): hdfs-native (flinkyarn/hdfs.py)
beside WebHDFS (fsspec's client, which flinkyarn used before) and Hadoop's own `hdfs dfs`,
in one run, on the local Hadoop's HA nameservice.

- write 1 GB: a local file (random bytes, made once into bench/results/) to a new HDFS
  file; native: the client's `create`, 8 MiB writes; WebHDFS: CREATE, the bytes to the
  DataNode it redirects to; `hdfs dfs -put`.
- read 1 GB: the file back, every byte, 8 MiB at a time; `hdfs dfs -cat > /dev/null`.
- list 10,000 files: one folder of 10,000 empty files (made once, kept), listed with
  each file's status; `hdfs dfs -ls`.
- write 20 small files (1 KB each), one after the other, as the runtime writes its
  metadata (job store, checkpoint metadata, credentials): milliseconds per file;
  `hdfs dfs -put` of the 20 in one command, its JVM's start included.

WebHDFS speaks to the active NameNode's web server (found by asking each of the
nameservice's); `hdfs dfs` includes its JVM's start (~1-2 s), as for a user. Each
operation runs once per client per round, clients in turn (the order rotates by round);
figures are medians over the rounds, as MB/s (1 MB = 10^6 bytes) and seconds, with the
ratio native / other. The machine is shared and noisy: read the ratios.

usage: .venv/bin/python bench/hdfs_throughput.py [--megabytes 1000] [--files 10000]
                                                 [--rounds 3]
Needs the local Hadoop (`integration/cluster up --nodes 2`). Writes
bench/results/hdfs_throughput.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "integration"))
import local_hadoop  # noqa: E402

from flinkyarn import hadoop, hdfs  # noqa: E402

RESULTS = REPO / "bench" / "results" / "hdfs_throughput.json"
CHUNK = 8 << 20
BASE = "/tmp/flinkyarn-bench-hdfs"
CLIENTS = ("native", "webhdfs", "hdfs-dfs")


def local_file(megabytes: int) -> Path:
    path = REPO / "bench" / "results" / f"hdfs-{megabytes}mb.bin"
    if not path.is_file() or path.stat().st_size != megabytes * 10**6:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            left = megabytes * 10**6
            while left:
                out.write(os.urandom(min(CHUNK, left)))
                left -= min(CHUNK, left)
    return path


def active_web() -> str:
    """http://host:port of the active NameNode's web server: each of the default
    nameservice's asked for its HA state (JMX)."""
    site = hadoop.site_properties("hdfs-site.xml")
    service = hadoop.default_fs().split("://", 1)[1].rstrip("/")
    ids = [i.strip() for i in site.get(f"dfs.ha.namenodes.{service}", "").split(",") if i.strip()]
    webs = [site[f"dfs.namenode.http-address.{service}.{i}"] for i in ids] or \
        [site.get("dfs.namenode.http-address", "127.0.0.1:9870")]
    for web in webs:
        url = f"http://{web}/jmx?qry=Hadoop:service=NameNode,name=NameNodeStatus"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                if json.load(answer)["beans"][0]["State"] == "active":
                    return f"http://{web}"
        except (OSError, KeyError, IndexError, ValueError):
            continue
    raise SystemExit(f"no active NameNode among {webs}")


def webhdfs():
    from fsspec.implementations.webhdfs import WebHDFS

    host, port = active_web().removeprefix("http://").rsplit(":", 1)
    return WebHDFS(host=host, port=int(port), user=os.environ.get("USER", "root"),
                   skip_instance_cache=True)


def hdfs_dfs(*args: str, stdout=subprocess.DEVNULL) -> None:
    subprocess.run(["hdfs", "dfs", *args], check=True, stdout=stdout, stderr=subprocess.PIPE)


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def write(client: str, local: Path, target: str) -> float:
    if client == "native":
        def act() -> None:
            from hdfs_native import WriteOptions
            settings = WriteOptions()
            settings.overwrite = True
            with open(local, "rb") as data, hdfs.filesystem().client.create(target, settings) as out:
                while chunk := data.read(CHUNK):
                    out.write(chunk)
    elif client == "webhdfs":
        def act() -> None:
            webhdfs().put_file(str(local), target)
    else:
        def act() -> None:
            hdfs_dfs("-put", "-f", str(local), target)
    return timed(act)


def read(client: str, target: str, size: int) -> float:
    got = [0]
    if client == "native":
        def act() -> None:
            with hdfs.filesystem().client.read(target) as source:
                while chunk := source.read(CHUNK):
                    got[0] += len(chunk)
    elif client == "webhdfs":
        def act() -> None:
            with webhdfs().open(target, "rb", block_size=64 << 20) as source:
                while chunk := source.read(CHUNK):
                    got[0] += len(chunk)
    else:
        def act() -> None:
            result = subprocess.run(["sh", "-c", f"hdfs dfs -cat {target} | wc -c"], check=True,
                                    capture_output=True, text=True)
            got[0] = int(result.stdout.split()[0])
    seconds = timed(act)
    if got[0] != size:
        raise SystemExit(f"{client} read {got[0]} bytes of {target}, not {size}")
    return seconds


def listing_folder(files: int) -> str:
    folder = f"{BASE}/listing-{files}"
    fs = hdfs.filesystem()
    marker = f"{folder}/_complete"
    if not fs.exists(marker):
        fs.makedirs(folder, exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: fs.client.create(f"{folder}/f-{i:05d}").close(), range(files)))
        fs.client.create(marker).close()
    return folder


def listing(client: str, folder: str, files: int) -> float:
    counted = [0]
    if client == "native":
        def act() -> None:
            counted[0] = len(hdfs.filesystem().ls(folder, detail=True))
    elif client == "webhdfs":
        def act() -> None:
            counted[0] = len(webhdfs().ls(folder, detail=True))
    else:
        def act() -> None:
            result = subprocess.run(["hdfs", "dfs", "-ls", folder], check=True,
                                    capture_output=True, text=True)
            counted[0] = sum(1 for line in result.stdout.splitlines() if line.startswith("-"))
    seconds = timed(act)
    if counted[0] != files + 1:  # and the marker
        raise SystemExit(f"{client} listed {counted[0]} entries of {folder}, not {files + 1}")
    return seconds


SMALL_FILES, SMALL_BYTES = 20, 1000


def small_writes(client: str, folder: str) -> float:
    """Seconds per file for SMALL_FILES new files of SMALL_BYTES each, one after the other."""
    data = os.urandom(SMALL_BYTES)
    targets = [f"{folder}/{client}-{i:02d}" for i in range(SMALL_FILES)]
    if client in ("native", "webhdfs"):
        def act() -> None:
            fs = hdfs.filesystem() if client == "native" else webhdfs()
            for target in targets:
                fs.pipe_file(target, data)
    else:
        local = Path(tempfile.mkdtemp(prefix="flinkyarn-bench-small-"))
        for target in targets:
            (local / target.rsplit("/", 1)[1]).write_bytes(data)

        def act() -> None:
            hdfs_dfs("-put", "-f", *(str(local / t.rsplit("/", 1)[1]) for t in targets), folder)
    try:
        return timed(act) / SMALL_FILES
    finally:
        if client == "hdfs-dfs":
            shutil.rmtree(local)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=1000)
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    local_hadoop.apply_env()
    local = local_file(args.megabytes)
    size = local.stat().st_size
    hdfs.filesystem().makedirs(BASE, exist_ok=True)
    folder = listing_folder(args.files)
    seconds: dict[str, dict[str, list[float]]] = {
        op: {c: [] for c in CLIENTS} for op in ("write", "read", "list", "small")}
    small_folder = f"{BASE}/small"
    hdfs.filesystem().makedirs(small_folder, exist_ok=True)
    for round_ in range(args.rounds):
        order = CLIENTS[round_ % 3:] + CLIENTS[:round_ % 3]
        for client in order:
            target = f"{BASE}/{client}-{args.megabytes}mb.bin"
            seconds["write"][client].append(write(client, local, target))
            seconds["read"][client].append(read(client, target, size))
            seconds["list"][client].append(listing(client, folder, args.files))
            seconds["small"][client].append(small_writes(client, small_folder))
        print(f"round {round_ + 1}: " + "; ".join(
            f"{c} write {seconds['write'][c][-1]:.1f} s, read {seconds['read'][c][-1]:.1f} s, "
            f"list {seconds['list'][c][-1]:.2f} s, small {seconds['small'][c][-1] * 1000:.0f} ms"
            for c in order), flush=True)
    for client in CLIENTS:
        hdfs.delete(hdfs.filesystem(), f"{BASE}/{client}-{args.megabytes}mb.bin")
    hdfs.delete(hdfs.filesystem(), small_folder)
    medians = {op: {c: statistics.median(v) for c, v in by.items()} for op, by in seconds.items()}
    figures = {
        "write_MBps": {c: size / 1e6 / s for c, s in medians["write"].items()},
        "read_MBps": {c: size / 1e6 / s for c, s in medians["read"].items()},
        "list_s": medians["list"],
        "small_write_ms": {c: s * 1000 for c, s in medians["small"].items()},
    }
    ratios = {f"native/{other}": {
        "write": figures["write_MBps"]["native"] / figures["write_MBps"][other],
        "read": figures["read_MBps"]["native"] / figures["read_MBps"][other],
        "list (speed-up)": medians["list"][other] / medians["list"]["native"],
        "small write (speed-up)": medians["small"][other] / medians["small"]["native"]}
        for other in ("webhdfs", "hdfs-dfs")}
    report = {"date": time.strftime("%Y-%m-%d"), "commit": _commit(), "machine": platform.node(),
              "cores": os.cpu_count(), "megabytes": args.megabytes, "files": args.files,
              "rounds": args.rounds, "seconds": seconds, "figures": figures, "ratios": ratios}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n| client | write MB/s | read MB/s | list {args.files} files (s) | "
          f"small write (ms/file) |")
    print("|---|---|---|---|---|")
    for c in CLIENTS:
        print(f"| {c} | {figures['write_MBps'][c]:.0f} | {figures['read_MBps'][c]:.0f} | "
              f"{figures['list_s'][c]:.2f} | {figures['small_write_ms'][c]:.0f} |")
    for name, r in ratios.items():
        print(f"{name}: write {r['write']:.2f}x, read {r['read']:.2f}x, "
              f"list {r['list (speed-up)']:.2f}x, small write {r['small write (speed-up)']:.2f}x")
    return 0


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True).stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
