"""docs/configuration.md from the option registry (flinkyarn/options.py): every option's
key, type, default and description, grouped by the first part of its key.

`integration/make-config-docs` writes the file; tests/unit/test_config_docs.py renders it
again and fails when the file differs, so an option added, changed or removed without
regenerating the page fails the unit tier.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "configuration.md"

HEADER = """\
# Configuration reference

<!-- Generated from flinkyarn/options.py by integration/make-config-docs; do not edit.
     tests/unit/test_config_docs.py fails when this file is stale. -->

Every option flinkyarn knows, with its type, default and description, as the option
registry (`flinkyarn/options.py`) defines it. Keys are Flink's where Flink has the
option.

Set an option in your `flinkyarn.yaml` ([install.md](install.md) says which file is
read) or for one command with `-D key=value`. `conf/flinkyarn.yaml` lists the same
options with their defaults, ready to copy from. Only the client reads the file: the
AppMaster and the TaskExecutors get the client's settings when it starts them.

Values are read as written:

- Duration: `10 s`, `500 ms`, `2 min`, `1 h`, `1 d` (a plain number is milliseconds).
- MemorySize: `1 gb`, `512 mb`, `64 kb`, `1024 b` (1024-based; a plain number is bytes).
- bool: `true` or `false`.
- str: any text; (empty) means the empty string.

Other types say what they accept in the type column.
"""


def _cell(text: str) -> str:
    """Text for one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _type(opt) -> str:
    from flinkyarn.configuration import BOOL, DURATION, MEMORY_SIZE, POSITIVE_DURATION, STRING
    from flinkyarn.options import DEADLINE

    if any(opt.type is shared for shared in (BOOL, DURATION, MEMORY_SIZE, STRING)):
        return opt.type.name
    # The header explains durations; say only what these two add.
    if opt.type is POSITIVE_DURATION:
        return "Duration, greater than 0"
    if opt.type is DEADLINE:
        return "Duration greater than 0, or empty (no deadline)"
    return f"{opt.type.name}: {opt.type.expected}"


def _default(opt) -> str:
    return f"`{opt.default}`" if opt.default.strip() else "(empty)"


def _description(opt) -> str:
    text = opt.description
    if opt.deprecated_keys:
        former = ", ".join(f"`{key}`" for key in opt.deprecated_keys)
        text += f" Formerly {former} (still read, with a warning)."
    return text


def render() -> str:
    """The page, from the options registered now."""
    from flinkyarn.configuration import registered_options

    groups: dict[str, list] = {}
    for key, opt in registered_options().items():
        groups.setdefault(key.split(".")[0], []).append(opt)
    lines = [HEADER]
    lines.append("Sections: " + ", ".join(f"[{name}](#{name})" for name in sorted(groups)) + ".")
    for name in sorted(groups):
        lines += ["", f"## {name}", "",
                  "| key | type | default | description |",
                  "|---|---|---|---|"]
        lines += [f"| `{opt.key}` | {_cell(_type(opt))} | {_cell(_default(opt))} | "
                  f"{_cell(_description(opt))} |" for opt in groups[name]]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv not in ([], ["--check"]):
        print("usage: integration/make-config-docs [--check]", file=sys.stderr)
        return 2
    text = render()
    if argv == ["--check"]:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(REPO)} is stale: run integration/make-config-docs",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    # This checkout's flinkyarn, whichever environment the interpreter is.
    sys.path.insert(0, str(REPO))
    sys.exit(main(sys.argv[1:]))
