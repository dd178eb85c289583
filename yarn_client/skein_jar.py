"""skein's jar, with the YARN application type `flinkyarn`.

skein submits every application with the type `skein`, a constant in its Java driver,
and has no option for it. Admins filter the YARN UI by type, so we derive a copy of
skein's jar whose driver says `flinkyarn`: in the class files of the driver, the one
constant-pool string `skein` is rewritten (a Utf8 constant: tag 1, a two-byte length,
the bytes; nothing in a class file refers to constant-pool byte offsets, so changing
its length is safe). Nothing else changes. The copy is cached beside the user's other
caches, keyed by the original's digest, and skein is pointed at it before it starts a
driver (`use_flinkyarn_jar`). The AppMaster container runs the same jar.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path

APPLICATION_TYPE = "flinkyarn"
_CLASSES = ("com/anaconda/skein/Driver.class", "com/anaconda/skein/Driver$DriverImpl.class")


def _utf8_constant(text: str) -> bytes:
    data = text.encode()
    return b"\x01" + len(data).to_bytes(2, "big") + data


def patch_class(data: bytes, name: str) -> bytes:
    """The class file with its `skein` string constant replaced by `flinkyarn`."""
    old, new = _utf8_constant("skein"), _utf8_constant(APPLICATION_TYPE)
    count = data.count(old)
    if count != 1:
        raise RuntimeError(f"{name}: expected one 'skein' string constant, found {count}; "
                           f"this skein version is not supported")
    return data.replace(old, new)


def patched_jar(original: str, cache: Path) -> Path:
    digest = hashlib.sha256(Path(original).read_bytes()).hexdigest()[:16]
    target = cache / f"skein-{digest}-{APPLICATION_TYPE}.jar"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache, suffix=".jar.partial")
    os.close(fd)
    with zipfile.ZipFile(original) as source, \
            zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for entry in source.infolist():
            data = source.read(entry)
            if entry.filename in _CLASSES:
                data = patch_class(data, entry.filename)
            out.writestr(entry, data)
    os.replace(tmp, target)
    return target


def use_flinkyarn_jar() -> str:
    """Points skein at the patched jar (idempotent); returns its path."""
    import skein.core

    current = skein.core._SKEIN_JAR
    if APPLICATION_TYPE in os.path.basename(current):
        return current
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flinkyarn"
    path = str(patched_jar(current, cache))
    skein.core._SKEIN_JAR = path
    return path
