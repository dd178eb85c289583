"""YARN's attempt-failures validity interval for skein's applications.

skein's Java driver sets an application's maximum attempts (`setMaxAppAttempts`) and
nothing else about attempts, so with it every AppMaster failure counts towards that
maximum however long ago it was (YARN's default, -1). Flink sets
`yarn.application-attempt-failures-validity-interval` on the submission context, so that
only failures close together end an application. We give skein's driver the same:

- `helper_class()` is the bytes of a class of our own, `com.anaconda.skein.
  FlinkyarnAttempts`, whose one static method takes the submission context and the
  maximum attempts, sets them, and sets the interval from the driver JVM's system
  property `flinkyarn.attempt-failures-validity-interval` (milliseconds; -1 when absent:
  YARN's default);
- `call_helper(driver)` rewrites the one call `context.setMaxAppAttempts(n)` in skein's
  Driver class into a call of that method. Both take the same two operands from the
  stack and leave nothing: only the instruction's opcode (invokevirtual -> invokestatic)
  and its constant-pool index change, with the new constants appended to the pool, so
  no offset in the class moves and no stack map changes.
"""

from __future__ import annotations

import struct

HELPER = "com/anaconda/skein/FlinkyarnAttempts"
HELPER_FILE = f"{HELPER}.class"
PROPERTY = "flinkyarn.attempt-failures-validity-interval"
_CONTEXT = "org/apache/hadoop/yarn/api/records/ApplicationSubmissionContext"
_METHOD = "setMaxAppAttempts"
_HELPER_DESCRIPTOR = f"(L{_CONTEXT};I)V"
_INVOKEVIRTUAL, _INVOKESTATIC = 0xB6, 0xB8
# Constant-pool entry sizes after the tag byte (Utf8: a length, then that many bytes).
_SIZES = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2,
          17: 4, 18: 4, 19: 2, 20: 2}
_UTF8, _CLASS, _STRING, _LONG, _METHODREF, _NAME_AND_TYPE = 1, 7, 8, 5, 10, 12


class UnsupportedClass(RuntimeError):
    """skein's class is not as this patch expects it: another skein version."""


def _utf8(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">BH", _UTF8, len(data)) + data


def _pool(data: bytes) -> tuple[dict[int, tuple[int, bytes]], int, int]:
    """(index -> (tag, body)), the pool's count and the offset where it ends."""
    count = struct.unpack_from(">H", data, 8)[0]
    entries: dict[int, tuple[int, bytes]] = {}
    offset, index = 10, 1
    while index < count:
        tag = data[offset]
        if tag == _UTF8:
            size = 2 + struct.unpack_from(">H", data, offset + 1)[0]
        elif tag in _SIZES:
            size = _SIZES[tag]
        else:
            raise UnsupportedClass(f"constant-pool tag {tag} at {offset}")
        entries[index] = (tag, data[offset + 1:offset + 1 + size])
        offset += 1 + size
        index += 2 if tag in (_LONG, 6) else 1  # a long or a double takes two entries
    return entries, count, offset


def call_helper(data: bytes) -> bytes:
    """skein's Driver class with its call of setMaxAppAttempts(I)V going to the helper."""
    entries, count, end = _pool(data)

    def text(index: int) -> str:
        tag, body = entries[index]
        assert tag == _UTF8
        return body[2:].decode()

    def refs(body: bytes) -> tuple[int, int]:
        return struct.unpack(">HH", body)

    targets = []
    for index, (tag, body) in entries.items():
        if tag != _METHODREF:
            continue
        owner, name_and_type = refs(body)
        name, descriptor = refs(entries[name_and_type][1])
        if (text(struct.unpack(">H", entries[owner][1])[0]), text(name), text(descriptor)) == (
                _CONTEXT, _METHOD, "(I)V"):
            targets.append(index)
    if len(targets) != 1:
        raise UnsupportedClass(f"{len(targets)} references to {_CONTEXT}.{_METHOD}")
    call = struct.pack(">BH", _INVOKEVIRTUAL, targets[0])
    rest = data[end:]
    if rest.count(call) != 1:
        raise UnsupportedClass(f"{rest.count(call)} calls of {_METHOD}")
    # Appended: the helper's class, the method's name and descriptor, its reference.
    new = count
    appended = (_utf8(HELPER) + struct.pack(">BH", _CLASS, new)
                + _utf8(_METHOD) + _utf8(_HELPER_DESCRIPTOR)
                + struct.pack(">BHH", _NAME_AND_TYPE, new + 2, new + 3)
                + struct.pack(">BHH", _METHODREF, new + 1, new + 4))
    method = new + 5
    return (data[:8] + struct.pack(">H", count + 6) + data[10:end] + appended
            + rest.replace(call, struct.pack(">BH", _INVOKESTATIC, method)))


def helper_class() -> bytes:
    """The class file of com.anaconda.skein.FlinkyarnAttempts (Java 6 format: verified
    without stack maps; it has no branch anyway):

        public static void setMaxAppAttempts(ApplicationSubmissionContext context, int n) {
            context.setMaxAppAttempts(n);
            context.setAttemptFailuresValidityInterval(
                Long.getLong("flinkyarn.attempt-failures-validity-interval", -1L).longValue());
        }
    """
    pool = [
        _utf8(HELPER),                                       # 1
        struct.pack(">BH", _CLASS, 1),                       # 2
        _utf8("java/lang/Object"),                           # 3
        struct.pack(">BH", _CLASS, 3),                       # 4
        _utf8(_METHOD),                                      # 5
        _utf8(_HELPER_DESCRIPTOR),                           # 6
        _utf8("Code"),                                       # 7
        _utf8(_CONTEXT),                                     # 8
        struct.pack(">BH", _CLASS, 8),                       # 9
        _utf8("(I)V"),                                       # 10
        struct.pack(">BHH", _NAME_AND_TYPE, 5, 10),          # 11
        struct.pack(">BHH", _METHODREF, 9, 11),              # 12: context.setMaxAppAttempts
        _utf8("setAttemptFailuresValidityInterval"),         # 13
        _utf8("(J)V"),                                       # 14
        struct.pack(">BHH", _NAME_AND_TYPE, 13, 14),         # 15
        struct.pack(">BHH", _METHODREF, 9, 15),              # 16: ...ValidityInterval
        _utf8(PROPERTY),                                     # 17
        struct.pack(">BH", _STRING, 17),                     # 18
        struct.pack(">Bq", _LONG, -1),                       # 19 (and 20)
        _utf8("java/lang/Long"),                             # 21
        struct.pack(">BH", _CLASS, 21),                      # 22
        _utf8("getLong"),                                    # 23
        _utf8("(Ljava/lang/String;J)Ljava/lang/Long;"),      # 24
        struct.pack(">BHH", _NAME_AND_TYPE, 23, 24),         # 25
        struct.pack(">BHH", _METHODREF, 22, 25),             # 26: Long.getLong
        _utf8("longValue"),                                  # 27
        _utf8("()J"),                                        # 28
        struct.pack(">BHH", _NAME_AND_TYPE, 27, 28),         # 29
        struct.pack(">BHH", _METHODREF, 22, 29),             # 30: Long.longValue
    ]
    code = bytes([
        0x2A, 0x1B, 0xB6, 0, 12,    # aload_0, iload_1, invokevirtual #12
        0x2A, 0x12, 18,             # aload_0, ldc #18
        0x14, 0, 19,                # ldc2_w #19
        0xB8, 0, 26,                # invokestatic #26
        0xB6, 0, 30,                # invokevirtual #30
        0xB6, 0, 16,                # invokevirtual #16
        0xB1,                       # return
    ])
    code_attribute = struct.pack(">HHI", 4, 2, len(code)) + code + struct.pack(">HH", 0, 0)
    method = (struct.pack(">HHHH", 0x0009, 5, 6, 1)                    # public static
              + struct.pack(">HI", 7, len(code_attribute)) + code_attribute)
    return (struct.pack(">IHHH", 0xCAFEBABE, 0, 50, 31) + b"".join(pool)
            + struct.pack(">HHHHHH", 0x0031, 2, 4, 0, 0, 1) + method + struct.pack(">H", 0))
