"""Encoding of control-plane messages: msgspec MessagePack, validated against the
declared type on decode. A message that does not decode as its declared type raises
MalformedMessage before any endpoint code runs."""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from flinkyarn.rpc.errors import MalformedMessage

_encoder = msgspec.msgpack.Encoder()


def encode(message: Any) -> bytes:
    return _encoder.encode(message)


@functools.lru_cache(maxsize=None)
def _decoder(kind: Any) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(kind)


def decode(data: bytes, kind: Any) -> Any:
    try:
        return _decoder(kind).decode(data)
    # msgspec lets invalid UTF-8 in a string through as UnicodeDecodeError.
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as error:
        name = getattr(kind, "__name__", str(kind))
        raise MalformedMessage(f"malformed {name}: {error}") from None
