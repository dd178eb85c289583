"""The configuration mechanism: typed options, their registry, and `Configuration`.

The options themselves are defined in `flinkyarn.options`; this module only knows how
to parse, register and look them up.

A `Configuration` holds raw strings (what a user wrote in a flinkyarn.yaml, found by
`config_file`, or in `-D key=value`) over the registered defaults. Every key must be a registered option and
every value is parsed when the Configuration is built, so a typo or a bad value fails at
start with the key named, never later inside a component. Components read it once, into
their own frozen configuration object (see `HeartbeatConfig` in `flinkyarn.options`).

The YAML file is read literally: values keep the text the user wrote (minus quotes), so
`true`, `10 s` or `0755` mean the same in the file and after `-D`.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml

T = TypeVar("T")
log = logging.getLogger(__name__)

CONF_DIR_ENV = "FLINKYARN_CONF_DIR"
HOME_ENV = "FLINKYARN_HOME"
CONF_FILE_NAME = "flinkyarn.yaml"


class ConfigurationError(ValueError):
    """A configuration key or value is wrong. The message names the key; for a bad value
    it also names the value and the form that was expected."""


# --------------------------------------------------------------------------- types


@dataclass(frozen=True, slots=True)
class OptionType(Generic[T]):
    """How the raw text of an option becomes its value.

    `parse` raises ValueError for text it does not accept; `ConfigOption.parse` turns that
    into a ConfigurationError naming the key, the value and `expected`.
    """

    name: str
    expected: str
    parse: Callable[[str], T]


def integer(minimum: int | None = None, maximum: int | None = None) -> OptionType[int]:
    """Whole numbers, optionally bounded (both bounds inclusive)."""

    def parse(text: str) -> int:
        value = int(text.strip())
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise ValueError("out of range")
        return value

    if minimum is not None and maximum is not None:
        expected = f"a whole number from {minimum} to {maximum}"
    elif minimum is not None:
        expected = f"a whole number of at least {minimum}"
    elif maximum is not None:
        expected = f"a whole number of at most {maximum}"
    else:
        expected = "a whole number"
    return OptionType("int", expected, parse)


def _parse_float(text: str) -> float:
    value = float(text.strip())
    if not math.isfinite(value):
        raise ValueError("not finite")
    return value


def _parse_positive_float(text: str) -> float:
    return _positive(_parse_float(text))


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError("not positive")
    return value


def _parse_fraction(text: str) -> float:
    value = _parse_float(text)
    if not 0 < value < 1:
        raise ValueError("not between 0 and 1")
    return value


def _parse_bool(text: str) -> bool:
    # Only true/false, as Flink: `yes`/`on` would mean true in YAML 1.1 but not after -D.
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError("not a boolean")


_DURATION_UNITS: dict[str, float] = {
    **dict.fromkeys(("ms", "milli", "millis", "millisecond", "milliseconds"), 0.001),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1.0),
    # "m" is minutes, as in Flink's TimeUtils (a duration has no metres to confuse).
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0),
}

_MEMORY_UNITS: dict[str, int] = {
    **dict.fromkeys(("b", "bytes"), 1),
    **dict.fromkeys(("k", "kb", "kibibytes"), 1 << 10),
    **dict.fromkeys(("m", "mb", "mebibytes"), 1 << 20),
    **dict.fromkeys(("g", "gb", "gibibytes"), 1 << 30),
    **dict.fromkeys(("t", "tb", "tebibytes"), 1 << 40),
}

_AMOUNT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def _split_amount(text: str) -> tuple[float, str]:
    """'10 s' -> (10.0, 's'). Signs are not accepted, so negative amounts are refused."""
    match = _AMOUNT.fullmatch(text)
    if match is None:
        raise ValueError("not an amount")
    number = float(match.group(1))
    if not math.isfinite(number):
        raise ValueError("too large")
    return number, match.group(2).lower()


def parse_duration(text: str) -> float:
    """Flink's duration syntax ('10 s', '500ms', '2 mins', '1 hour') -> seconds.
    A plain number is milliseconds, as in Flink."""
    number, unit = _split_amount(text)
    if not unit:
        return number / 1000
    if unit not in _DURATION_UNITS:
        raise ValueError(f"unknown unit {unit!r}")
    return number * _DURATION_UNITS[unit]


def parse_memory_size(text: str) -> int:
    """Flink's memory syntax ('1g', '512 mb', '64 kb', '1024b'; 1024-based) -> bytes.
    A plain number is bytes, as in Flink."""
    number, unit = _split_amount(text)
    if unit and unit not in _MEMORY_UNITS:
        raise ValueError(f"unknown unit {unit!r}")
    return round(number * _MEMORY_UNITS.get(unit, 1))


def format_duration(seconds: float) -> str:
    """Seconds -> the largest unit that states them exactly: 60 -> '1 min', 0.1 -> '100 ms'.
    `parse_duration` reads the result back to the same value."""
    millis = round(float(seconds) * 1000, 6)
    if millis.is_integer():
        for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
            if millis != 0 and millis % size == 0:
                return f"{int(millis // size)} {unit}"
        return f"{int(millis)} ms"
    return f"{millis:g} ms"


def format_memory(size: int) -> str:
    """Bytes -> the largest unit that states them exactly: 1 << 30 -> '1 gb',
    1536 << 20 -> '1536 mb'. `parse_memory_size` reads the result back to the same value."""
    for unit, unit_size in (("tb", 1 << 40), ("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
        if size != 0 and size % unit_size == 0:
            return f"{size // unit_size} {unit}"
    return f"{size} b"


def choice(*values: str) -> OptionType[str]:
    """One of fixed strings, matched case-insensitively; the value is the string as
    given here."""
    by_lower = {value.lower(): value for value in values}

    def parse(text: str) -> str:
        return by_lower[text.strip().lower()]

    return OptionType("choice", "one of " + ", ".join(values), parse)


INT: OptionType[int] = integer()
FLOAT: OptionType[float] = OptionType("float", "a number", _parse_float)
POSITIVE_FLOAT: OptionType[float] = OptionType("float", "a number greater than 0", _parse_positive_float)
FRACTION: OptionType[float] = OptionType("float", "a number between 0 and 1 (both excluded)", _parse_fraction)
BOOL: OptionType[bool] = OptionType("bool", "true or false", _parse_bool)
STRING: OptionType[str] = OptionType("str", "any text", str)
DURATION: OptionType[float] = OptionType(
    "Duration",
    "a duration such as '10 s', '500 ms', '2 min', '1 h' or '1 d' (a plain number is milliseconds)",
    parse_duration,
)
POSITIVE_DURATION: OptionType[float] = OptionType(
    "Duration",
    "a duration greater than 0 such as '10 s', '500 ms' or '2 min' (a plain number is milliseconds)",
    lambda text: _positive(parse_duration(text)),
)
MEMORY_SIZE: OptionType[int] = OptionType(
    "MemorySize",
    "a memory size such as '1 gb', '512m', '64 kb' or '1024b' (a plain number is bytes)",
    parse_memory_size,
)


# ------------------------------------------------------------------------ registry


@dataclass(frozen=True, slots=True)
class ConfigOption(Generic[T]):
    """One option: its key, type, default (as a user would write it) and description;
    `deprecated_keys` are its former names, still read (with a warning)."""

    key: str
    type: OptionType[T]
    default: str
    description: str
    deprecated_keys: tuple[str, ...] = ()

    def parse(self, text: str, source: str = "") -> T:
        """The typed value of `text`, or ConfigurationError naming this key (and `source`,
        where the text came from, when given)."""
        try:
            return self.type.parse(text)
        except (ValueError, KeyError):
            where = f" in {source}" if source else ""
            raise ConfigurationError(
                f"bad value {text!r} for option {self.key!r}{where}: expected {self.type.expected}"
            ) from None

    @property
    def default_value(self) -> T:
        return self.parse(self.default)


_REGISTRY: dict[str, ConfigOption[Any]] = {}
_DEPRECATED: dict[str, str] = {}  # a former key -> the key of its option now


def option(key: str, type: OptionType[T], default: str, description: str,
           deprecated_keys: tuple[str, ...] = ()) -> ConfigOption[T]:
    """Define an option and register it. Called at import time of `flinkyarn.options`.

    Raises ConfigurationError if `key` (or a deprecated key) is already registered or
    `default` does not parse.
    """
    for name in (key, *deprecated_keys):
        if name in _REGISTRY or name in _DEPRECATED:
            raise ConfigurationError(f"option {name!r} is registered twice")
    defined = ConfigOption(key, type, default, description, tuple(deprecated_keys))
    defined.default_value  # noqa: B018 - a default that does not parse is a bug; fail at import
    _REGISTRY[key] = defined
    _DEPRECATED.update(dict.fromkeys(deprecated_keys, key))
    return defined


def _renamed(raw: Mapping[str, str], where: str) -> dict[str, str]:
    """`raw` with each deprecated key under its option's key now (a warning says so); the
    current key wins when both are set."""
    renamed = {key: value for key, value in raw.items() if key not in _DEPRECATED}
    for old, value in raw.items():
        new = _DEPRECATED.get(old)
        if new is not None:
            log.warning("option %r%s is deprecated: use %r", old, where, new)
            renamed.setdefault(new, value)
    return renamed


def registered_options() -> Mapping[str, ConfigOption[Any]]:
    """Every registered option by key, in definition order (read-only)."""
    # The registry fills when flinkyarn.options is imported; it imports this module, so
    # the import has to happen here rather than at the top.
    import flinkyarn.options  # noqa: F401

    return dict(_REGISTRY)


# ------------------------------------------------------------------- configuration


class Configuration:
    """Immutable: raw values explicitly set (from a file, `-D`, or another process) over
    the registered defaults. Every value is parsed on construction.

    Build one with `load` (a process that reads the config file), `from_raw` (a process
    handed `raw()` by its parent) or `Configuration()` (all defaults, for tests).
    """

    __slots__ = ("_raw", "_values")

    def __init__(self, raw: Mapping[str, str] | None = None, *, source: str = "") -> None:
        """Raises ConfigurationError for an unknown key or a bad value; `source` (e.g.
        the file name) is named in the message."""
        options = registered_options()
        where = f" in {source}" if source else ""
        self._raw: dict[str, str] = _renamed(raw or {}, where)
        for key in self._raw:
            if key not in options:
                raise ConfigurationError(f"unknown option {key!r}{where}; {_suggest(key, options)}")
        self._values: dict[str, Any] = {
            key: opt.parse(self._raw[key], source) if key in self._raw else opt.default_value
            for key, opt in options.items()
        }

    @classmethod
    def load(cls, path: Path | None = None, overrides: Mapping[str, str] | None = None) -> Configuration:
        """The file at `path` (default: `config_file()`; when that finds none, nothing
        over the registered defaults), then `overrides` (from `-D`) on top. Raises
        ConfigurationError for a missing or malformed file, an unknown key, or a bad value."""
        path = path or config_file()
        from_file = cls(_read_yaml(path), source=str(path)) if path is not None else cls()
        return from_file.with_overrides(overrides or {})

    @classmethod
    def from_raw(cls, raw: Mapping[str, str]) -> Configuration:
        """Rebuild what another process's `raw()` returned; validated like `load`."""
        return cls(raw)

    def get(self, option: ConfigOption[T]) -> T:
        """The typed value of `option`: the set value, else its default."""
        try:
            value: T = self._values[option.key]  # made by option.parse or its default
        except KeyError:
            raise ConfigurationError(f"option {option.key!r} is not registered") from None
        return value

    def raw(self) -> dict[str, str]:
        """The explicitly set values (defaults left out), to hand to another process."""
        return dict(self._raw)

    def with_overrides(self, overrides: Mapping[str, str]) -> Configuration:
        """A new Configuration with `overrides` replacing this one's values."""
        if not overrides:
            return self
        return Configuration({**self._raw, **overrides}, source="overrides (-D)")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Configuration) and self._raw == other._raw

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Configuration({self._raw!r})"


def _suggest(key: str, options: Mapping[str, ConfigOption[Any]]) -> str:
    close = difflib.get_close_matches(key, list(options), n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"no option has a similar name (all are listed in {CONF_FILE_NAME})"


def _read_yaml(path: Path) -> dict[str, str]:
    """A flat YAML mapping of key -> scalar, values as written (YAML's BaseLoader keeps
    every scalar a string). Duplicate keys are refused rather than silently last-wins."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigurationError(f"cannot read configuration file {path}: {error.strerror}") from None
    try:
        root = yaml.compose(text, Loader=yaml.BaseLoader)
    except yaml.YAMLError as error:
        raise ConfigurationError(f"configuration file {path} is not valid YAML: {error}") from None
    if root is None:
        return {}
    if not isinstance(root, yaml.MappingNode):
        raise ConfigurationError(f"configuration file {path} must be a mapping of option key to value")
    values: dict[str, str] = {}
    for key_node, value_node in root.value:
        line = key_node.start_mark.line + 1
        if not isinstance(key_node, yaml.ScalarNode):
            raise ConfigurationError(f"configuration file {path}, line {line}: a key must be a plain string")
        key = key_node.value
        if not isinstance(value_node, yaml.ScalarNode):
            raise ConfigurationError(
                f"configuration file {path}, line {line}: the value of {key!r} must be a single value, "
                "not a list or mapping (keys are flat, e.g. 'heartbeat.interval: 10 s')"
            )
        if key in values:
            raise ConfigurationError(f"configuration file {path}, line {line}: {key!r} is set twice")
        values[key] = value_node.value
    return values


def config_file() -> Path | None:
    """The file `load` reads, the first of (docs/install.md):

    1. `$FLINKYARN_CONF_DIR/flinkyarn.yaml` when the variable is set; a missing file is
       then an error of `load`, not a reason to look further;
    2. the user's `flinkyarn.yaml` in flinkyarn's folder of the user (`user_config_file`),
       where it exists;
    3. none: every option has its registered default (`flinkyarn.options`, which the
       repository's `conf/flinkyarn.yaml` lists). Nothing depends on where or how
       flinkyarn is installed.

    Only a process that starts from a command reads a file: the processes a client
    starts (AppMaster, TaskExecutors) get the client's settings (`raw`)."""
    conf_dir = os.environ.get(CONF_DIR_ENV)
    if conf_dir:
        return Path(conf_dir) / CONF_FILE_NAME
    user_file = user_config_file()
    return user_file if user_file.is_file() else None


def user_config_file() -> Path:
    """`flinkyarn.yaml` in the user's own folder of flinkyarn: `$FLINKYARN_HOME`, else
    `~/.flinkyarn` (the folder of its applications and tickets, kerberos.client_home)."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".flinkyarn") / CONF_FILE_NAME


def parse_dynamic_properties(items: Iterable[str]) -> dict[str, str]:
    """`-D` arguments ("key=value") -> {key: value}. The key is stripped of spaces; the
    value is everything after the first '=', verbatim (it may be empty). A later item
    wins over an earlier one with the same key. Keys are checked by `Configuration`."""
    properties: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigurationError(f"bad dynamic property {item!r}: expected key=value")
        properties[key] = value
    return properties
