"""The script the smoke application's master runs inside its YARN container.

usage: smoke_app.py HDFS_URL TEXT     writes TEXT to HDFS_URL, then reads it back
       smoke_app.py --fail MESSAGE    raises RuntimeError(MESSAGE): the application must fail
"""

import os
import sys

from flinkyarn import hadoop


def main(argv: list[str]) -> None:
    if argv[0] == "--fail":
        raise RuntimeError(argv[1])
    url, text = argv
    fs = hadoop.hdfs()
    path = hadoop.hdfs_path(url)
    fs.makedirs(os.path.dirname(path), exist_ok=True)
    with fs.open(path, "wb") as out:
        out.write(text.encode())
    with fs.open(path, "rb") as back:
        assert back.read().decode() == text
    print(f"wrote {len(text)} bytes to {url} from container {os.environ.get('CONTAINER_ID')}")


if __name__ == "__main__":
    main(sys.argv[1:])
