"""Does this container's Python fit the client's? Run first in every YARN container:

    PYTHON flinkyarn-code/flinkyarn/runtime_check.py "python=3.11.7 pyarrow=26.0.1 pyspark=4.3.0"

Exits 0 when the interpreter and its pyarrow and pyspark match what the client runs, else
prints one line naming both sides and exits EXIT_MISMATCH. Python must match in major and
minor version (the bytecode of the pickled functions and the extension modules' ABI are
per minor version); pyarrow and pyspark exactly (the client built the job against them).

Standard library only, and no syntax newer than Python 3.6: it has to speak up inside
the wrong interpreter too, before anything of flinkyarn is imported.
"""

import sys
from typing import Dict, List, Mapping, Sequence

EXIT_MISMATCH = 78  # EX_CONFIG
# Every diagnostic of a mismatch starts so; the AppMaster recognises it in a container's
# exit message (the launch script writes it where YARN's diagnostics pick it up).
MARKER = "flinkyarn: environment mismatch:"
PACKAGES = ("pyarrow", "pyspark")


def versions() -> Dict[str, str]:
    """{'python': '3.11.7', 'pyarrow': '26.0.1', 'pyspark': '4.3.0'} of this interpreter;
    a package that is not installed is 'missing'."""
    found = {"python": "%d.%d.%d" % tuple(sys.version_info[:3])}
    for name in PACKAGES:
        found[name] = _version(name)
    return found


def _version(package: str) -> str:
    try:
        from importlib import metadata
        return metadata.version(package)
    except Exception:  # not installed, or Python < 3.8 (no importlib.metadata)
        return "missing"


def describe(found: Mapping[str, str]) -> str:
    return " ".join("%s=%s" % (name, found.get(name, "missing")) for name in ("python",) + PACKAGES)


def parse(text: str) -> Dict[str, str]:
    return dict(item.split("=", 1) for item in text.split() if "=" in item)


def mismatches(expected: Mapping[str, str], actual: Mapping[str, str]) -> List[str]:
    """The names whose versions do not fit, in a stable order."""
    wrong = []
    for name in ("python",) + PACKAGES:
        want, have = expected.get(name), actual.get(name)
        if want is None:
            continue
        if name == "python":
            if want.split(".")[:2] != (have or "").split(".")[:2]:
                wrong.append(name)
        elif want != have:
            wrong.append(name)
    return wrong


def main(argv: Sequence[str]) -> int:
    expected = parse(argv[1] if len(argv) > 1 else "")
    actual = versions()
    wrong = mismatches(expected, actual)
    if not wrong:
        return 0
    print("%s the container's Python environment does not fit the client's: %s "
          "(container: %s at %s; client: %s). Ship a matching environment, or fix "
          "python.archives / python.executable."
          % (MARKER, ", ".join("%s %s here, %s on the client" % (n, actual.get(n), expected.get(n))
                       for n in wrong),
             describe(actual), sys.executable, describe(expected)))
    return EXIT_MISMATCH


if __name__ == "__main__":
    sys.exit(main(sys.argv))
