"""Hypothesis strategies for what a hostile or broken peer sends the AppMaster: random
bytes, MessagePack of any shape, messages of the right type with random (and sometimes
one wrong-shaped) values, and valid encodings truncated or garbled.

`typed(kind)` walks msgspec's description of a message type (msgspec.inspect), so a
gateway's new message types are fuzzed without a change here."""

from __future__ import annotations

from typing import Any

import msgspec
import msgspec.inspect as mi
from hypothesis import strategies as st

from flinkyarn.gateways.dispatcher import SubmitJob
from flinkyarn.jobgraph import JobGraph, JobVertex

MSGPACK_INTS = st.integers(-(1 << 63), (1 << 64) - 1)
"""Every integer MessagePack can carry."""

INTS = st.one_of(st.integers(-2, 4), MSGPACK_INTS)
TEXT = st.text(max_size=12)
BINARY = st.binary(max_size=24)

ANY_SCALAR = st.one_of(st.none(), st.booleans(), MSGPACK_INTS, st.floats(), TEXT, BINARY)
ANY_VALUE = st.recursive(
    ANY_SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(ANY_SCALAR, inner, max_size=4)),
    max_leaves=12)
"""A MessagePack value of any shape: nested maps and arrays of scalars."""


def msgpack(values: st.SearchStrategy) -> st.SearchStrategy[bytes]:
    return values.map(msgspec.msgpack.encode)


def typed(kind: Any, strict: bool = True) -> st.SearchStrategy:
    """Values of message type `kind` as a peer would encode them (structs as maps by
    their wire names), with random contents. Not `strict`: any leaf may be a value of
    the wrong shape, and optional fields come and go."""
    return _typed(mi.type_info(kind), strict)


def _typed(info: mi.Type, strict: bool, key: bool = False) -> st.SearchStrategy:
    right = _right_shape(info, strict)
    return right if strict else _sometimes_wrong(right, ANY_SCALAR if key else ANY_VALUE)


@st.composite
def _sometimes_wrong(draw, right: st.SearchStrategy, wrong: st.SearchStrategy):
    """Mostly `right`: a message with every leaf wrong tells little."""
    return draw(wrong) if draw(st.integers(0, 3)) == 0 else draw(right)


def _right_shape(info: mi.Type, strict: bool) -> st.SearchStrategy:
    if isinstance(info, mi.StructType):
        required = {f.encode_name: _typed(f.type, strict) for f in info.fields if f.required}
        optional = {f.encode_name: _typed(f.type, strict) for f in info.fields if not f.required}
        return st.fixed_dictionaries(required, optional=optional)
    if isinstance(info, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return st.lists(_typed(info.item_type, strict), max_size=3)
    if isinstance(info, mi.TupleType):
        return st.tuples(*(_typed(item, strict) for item in info.item_types)).map(list)
    if isinstance(info, mi.DictType):
        return st.dictionaries(_typed(info.key_type, strict, key=True),
                               _typed(info.value_type, strict), max_size=3)
    if isinstance(info, mi.UnionType):
        return st.one_of(*(_typed(t, strict) for t in info.types))
    if isinstance(info, mi.EnumType):
        values = st.sampled_from([member.value for member in info.cls])
        return values if strict else _sometimes_wrong(values, TEXT)
    if isinstance(info, mi.LiteralType):
        return st.sampled_from(list(info.values))
    scalars = {mi.StrType: TEXT, mi.IntType: INTS, mi.FloatType: st.floats(),
               mi.BoolType: st.booleans(), mi.NoneType: st.none(), mi.BytesType: BINARY}
    return scalars.get(type(info), ANY_VALUE)


@st.composite
def garbled(draw, encodings: st.SearchStrategy[bytes]) -> bytes:
    """A valid encoding, then truncated, or with bytes flipped, inserted or cut out."""
    data = draw(encodings)
    at = draw(st.integers(0, len(data)))
    how = draw(st.sampled_from(["truncate", "flip", "insert", "cut"]))
    if how == "truncate":
        return data[:at]
    if how == "flip" and at < len(data):
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]
    if how == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    return data[:at] + data[at + draw(st.integers(1, 8)):]


def bodies(kind: Any) -> st.SearchStrategy[bytes]:
    """Request bodies claiming to be a `kind`: random bytes, MessagePack of any shape,
    `kind`s with random contents (strict or not), and garbled encodings of those."""
    shaped = st.one_of(msgpack(typed(kind)), msgpack(typed(kind, strict=False)))
    return st.one_of(st.binary(max_size=64), msgpack(ANY_VALUE), shaped, garbled(shaped))


VALID_SUBMISSION = msgspec.msgpack.encode(SubmitJob(JobGraph(
    "fuzz-template", "fuzz template", [JobVertex("v", "vertex", 1, b"not a pickle")])))
"""A SubmitJob that decodes and validates, for `garbled`: most garbles keep it close
to valid. The AppMaster never gets it unchanged (its vertex would fail anyway)."""

SUBMISSIONS = st.one_of(bodies(SubmitJob), garbled(st.just(VALID_SUBMISSION)))

