"""YARN's attempt-failures validity interval and final tracking URL for skein's
applications.

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

The same way, skein's ApplicationMaster unregisters through `unregister_helper_class()`,
which passes YARN the URL the AppMaster left in FINAL_TRACKING_URL_FILE, if it did: the
history server's page of the ended application (`historyserver.web.address`); and
computes the interval of its calls to YARN's allocate while no container is pending
through `heartbeat_helper_class()`, capped by `yarn.heartbeat.interval` from the
AppMaster's environment (skein's own: at most 5 s, from the YARN configuration); and
takes the end of an attempt for the application's own (unregisters, so YARN starts no
other attempt) when the AppMaster left FINAL_END_FILE, and in our applications otherwise
leaves the next attempt to YARN, through `last_attempt_helper_class()`: skein
unregisters a success or what it counts as the last attempt, which the validity
interval may not be.
"""

from __future__ import annotations

import struct

from flinkyarn.archive import FINAL_TRACKING_URL_FILE
from flinkyarn.job_store import FINAL_END_FILE

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
_UTF8, _INTEGER, _CLASS, _STRING, _LONG, _FIELDREF, _METHODREF, _NAME_AND_TYPE = (
    1, 3, 7, 8, 5, 9, 10, 12)


class UnsupportedClass(RuntimeError):
    """skein's class is not as this patch expects it: another skein version."""


def _utf8(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">BH", _UTF8, len(data)) + data


def _method_ref(first: int, owner: str, name: str, descriptor: str) -> list[bytes]:
    """Six constant-pool entries, the first at index `first`: the class `owner` (its
    name, then the class), the method's name and descriptor, their NameAndType, and the
    Methodref (at `first + 5`)."""
    return [_utf8(owner), struct.pack(">BH", _CLASS, first),
            _utf8(name), _utf8(descriptor),
            struct.pack(">BHH", _NAME_AND_TYPE, first + 2, first + 3),
            struct.pack(">BHH", _METHODREF, first + 1, first + 4)]


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
    return redirect_call(data, (_CONTEXT, _METHOD, "(I)V"), HELPER, _HELPER_DESCRIPTOR)


def redirect_call(data: bytes, target: tuple[str, str, str], helper: str,
                  helper_descriptor: str, opcode: int = _INVOKEVIRTUAL) -> bytes:
    """The class file `data` with its one invokevirtual (or `opcode`: invokestatic) of
    `target` (owner, method name, descriptor) turned into an invokestatic of the method
    of the same name in class `helper`, whose descriptor takes the receiver first (for an
    invokevirtual): the same operands, so nothing else in the class moves.
    UnsupportedClass unless there is exactly one such call."""
    owner_name, method_name, descriptor = target
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
        name, described = refs(entries[name_and_type][1])
        if (text(struct.unpack(">H", entries[owner][1])[0]), text(name), text(described)) == target:
            targets.append(index)
    if len(targets) != 1:
        raise UnsupportedClass(f"{len(targets)} references to {owner_name}.{method_name}")
    call = struct.pack(">BH", opcode, targets[0])
    rest = data[end:]
    if rest.count(call) != 1:
        raise UnsupportedClass(f"{rest.count(call)} calls of {method_name}")
    # Appended: the helper's class, the method's name and descriptor, its reference.
    new = count
    appended = b"".join(_method_ref(new, helper, method_name, helper_descriptor))
    method = new + 5
    return (data[:8] + struct.pack(">H", count + 6) + data[10:end] + appended
            + rest.replace(call, struct.pack(">BH", _INVOKESTATIC, method)))


def _path_of(name: str) -> list[bytes]:
    """Constant-pool entries 8 to 17 of a helper that opens file `name` of its working
    folder: 9 String's class, 11 `name` as a string constant, 17 Paths.get(String,
    String[])."""
    return [
        _utf8("java/lang/String"),                                    # 8
        struct.pack(">BH", _CLASS, 8),                                # 9
        _utf8(name),                                                  # 10
        struct.pack(">BH", _STRING, 10),                              # 11
        *_method_ref(12, "java/nio/file/Paths", "get",                # 12-17: Paths.get
                     "(Ljava/lang/String;[Ljava/lang/String;)Ljava/nio/file/Path;"),
    ]


def method_info(method_name: int, descriptor: int, code: bytes, max_stack: int,
                max_locals: int, exceptions: bytes = b"", handlers: int = 0) -> bytes:
    """A public static method of a class file whose pool has the Utf8 "Code" at 5;
    `method_name`, `descriptor`: pool indices; `exceptions`: `handlers`
    exception-table entries (start, end, handler, catch type: four u2)."""
    code_attribute = (struct.pack(">HHI", max_stack, max_locals, len(code)) + code
                      + struct.pack(">H", handlers) + exceptions + struct.pack(">H", 0))
    return (struct.pack(">HHHH", 0x0009, method_name, descriptor, 1)  # public static
            + struct.pack(">HI", 5, len(code_attribute)) + code_attribute)


def class_file(name: str, pool: list[bytes], method_name: int, descriptor: int, code: bytes,
               max_stack: int, max_locals: int, exceptions: bytes = b"",
               handlers: int = 0, more_methods: tuple[bytes, ...] = (),
               fields: tuple[bytes, ...] = ()) -> bytes:
    """A class file (Java 6 format: verified without stack maps) of public class `name`
    extending java.lang.Object with one public static method (method_info's arguments),
    and `more_methods` (method_info's results) and `fields` (field_info structures).
    `pool` holds the constants from index 5 on (1-4: the class's and Object's names and
    classes, 5 must be the Utf8 "Code")."""
    head = [_utf8(name), struct.pack(">BH", _CLASS, 1), _utf8("java/lang/Object"),
            struct.pack(">BH", _CLASS, 3)]
    entries = head + pool
    count = 1 + sum(2 if entry[0] in (_LONG, 6) else 1 for entry in entries)
    methods = (method_info(method_name, descriptor, code, max_stack, max_locals, exceptions,
                           handlers), *more_methods)
    return (struct.pack(">IHHH", 0xCAFEBABE, 0, 50, count) + b"".join(entries)
            + struct.pack(">HHHHH", 0x0031, 2, 4, 0, len(fields)) + b"".join(fields)
            + struct.pack(">H", len(methods)) + b"".join(methods) + struct.pack(">H", 0))


def helper_class() -> bytes:
    """The class file of com.anaconda.skein.FlinkyarnAttempts (no branch):

        public static void setMaxAppAttempts(ApplicationSubmissionContext context, int n) {
            context.setMaxAppAttempts(n);
            context.setAttemptFailuresValidityInterval(
                Long.getLong("flinkyarn.attempt-failures-validity-interval", -1L).longValue());
        }
    """
    pool = [
        _utf8("Code"),                                       # 5
        _utf8(_METHOD),                                      # 6
        _utf8(_HELPER_DESCRIPTOR),                           # 7
        _utf8(_CONTEXT),                                     # 8
        struct.pack(">BH", _CLASS, 8),                       # 9
        _utf8("(I)V"),                                       # 10
        struct.pack(">BHH", _NAME_AND_TYPE, 6, 10),          # 11
        struct.pack(">BHH", _METHODREF, 9, 11),              # 12: context.setMaxAppAttempts
        _utf8("setAttemptFailuresValidityInterval"),         # 13
        _utf8("(J)V"),                                       # 14
        struct.pack(">BHH", _NAME_AND_TYPE, 13, 14),         # 15
        struct.pack(">BHH", _METHODREF, 9, 15),              # 16: ...ValidityInterval
        _utf8(PROPERTY),                                     # 17
        struct.pack(">BH", _STRING, 17),                     # 18
        struct.pack(">Bq", _LONG, -1),                       # 19 (and 20)
        *_method_ref(21, "java/lang/Long", "getLong",        # 21-26: Long.getLong
                     "(Ljava/lang/String;J)Ljava/lang/Long;"),
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
    return class_file(HELPER, pool, 6, 7, code, max_stack=4, max_locals=2)


# ------------------------------------------------ the final tracking URL of an application

UNREGISTER_HELPER = "com/anaconda/skein/FlinkyarnUnregister"
UNREGISTER_HELPER_FILE = f"{UNREGISTER_HELPER}.class"
_AMRM_CLIENT = "org/apache/hadoop/yarn/client/api/AMRMClient"
_FINAL_STATUS = "org/apache/hadoop/yarn/api/records/FinalApplicationStatus"
_UNREGISTER = "unregisterApplicationMaster"
_UNREGISTER_DESCRIPTOR = f"(L{_FINAL_STATUS};Ljava/lang/String;Ljava/lang/String;)V"
_UNREGISTER_HELPER_DESCRIPTOR = (f"(L{_AMRM_CLIENT};L{_FINAL_STATUS};Ljava/lang/String;"
                                 "Ljava/lang/String;)V")


def call_unregister_helper(application_master: bytes) -> bytes:
    """skein's ApplicationMaster class with its one call of
    rmClient.unregisterApplicationMaster(status, message, null) going to our helper."""
    return redirect_call(application_master, (_AMRM_CLIENT, _UNREGISTER, _UNREGISTER_DESCRIPTOR),
                         UNREGISTER_HELPER, _UNREGISTER_HELPER_DESCRIPTOR)


def unregister_helper_class() -> bytes:
    """The class file of com.anaconda.skein.FlinkyarnUnregister. skein's ApplicationMaster
    unregisters without a final tracking URL; the AppMaster (Python, in the same
    container and working folder) leaves the URL in a file before it ends:

        public static void unregisterApplicationMaster(AMRMClient client,
                FinalApplicationStatus status, String message, String url) {
            try {
                url = new String(Files.readAllBytes(Paths.get(
                    "flinkyarn-final-tracking-url", new String[0]))).trim();
            } catch (Exception absent) {
            }
            client.unregisterApplicationMaster(status, message, url);
        }
    """
    pool = [
        _utf8("Code"),                                                # 5
        _utf8(_UNREGISTER),                                           # 6
        _utf8(_UNREGISTER_HELPER_DESCRIPTOR),                         # 7
        *_path_of(FINAL_TRACKING_URL_FILE),                          # 8-17
        *_method_ref(18, "java/nio/file/Files", "readAllBytes",       # 18-23: Files.readAllBytes
                     "(Ljava/nio/file/Path;)[B"),
        _utf8("<init>"),                                              # 24
        _utf8("([B)V"),                                               # 25
        struct.pack(">BHH", _NAME_AND_TYPE, 24, 25),                  # 26
        struct.pack(">BHH", _METHODREF, 9, 26),                       # 27: new String(byte[])
        _utf8("trim"),                                                # 28
        _utf8("()Ljava/lang/String;"),                                # 29
        struct.pack(">BHH", _NAME_AND_TYPE, 28, 29),                  # 30
        struct.pack(">BHH", _METHODREF, 9, 30),                       # 31: String.trim
        _utf8("java/lang/Exception"),                                 # 32
        struct.pack(">BH", _CLASS, 32),                               # 33
        _utf8(_AMRM_CLIENT),                                          # 34
        struct.pack(">BH", _CLASS, 34),                               # 35
        _utf8(_UNREGISTER_DESCRIPTOR),                                # 36
        struct.pack(">BHH", _NAME_AND_TYPE, 6, 36),                   # 37
        struct.pack(">BHH", _METHODREF, 35, 37),                      # 38: client.unregister...
    ]
    code = bytes([
        0xBB, 0, 9,        # 0: new String
        0x59,              # 3: dup
        0x12, 11,          # 4: ldc "flinkyarn-final-tracking-url"
        0x03,              # 6: iconst_0
        0xBD, 0, 9,        # 7: anewarray String
        0xB8, 0, 17,       # 10: invokestatic Paths.get
        0xB8, 0, 23,       # 13: invokestatic Files.readAllBytes
        0xB7, 0, 27,       # 16: invokespecial String.<init>([B)V
        0xB6, 0, 31,       # 19: invokevirtual String.trim
        0x4E,              # 22: astore_3 (url)
        0xA7, 0, 4,        # 23: goto 27
        0x57,              # 26: pop (the exception): url stays as it was
        0x2A, 0x2B, 0x2C, 0x2D,  # 27: aload_0..aload_3
        0xB6, 0, 38,       # 31: invokevirtual AMRMClient.unregisterApplicationMaster
        0xB1,              # 34: return
    ])
    handler = struct.pack(">HHHH", 0, 23, 26, 33)  # [0, 23) -> 26, catching Exception
    return class_file(UNREGISTER_HELPER, pool, 6, 7, code, max_stack=4, max_locals=4,
                      exceptions=handler, handlers=1)


# ----------------------------------------------- the ApplicationMaster's heartbeat with YARN

HEARTBEAT_HELPER = "com/anaconda/skein/FlinkyarnHeartbeat"
HEARTBEAT_HELPER_FILE = f"{HEARTBEAT_HELPER}.class"
HEARTBEAT_ENV = "FLINKYARN_YARN_HEARTBEAT_MS"
PENDING_HEARTBEAT_ENV = "FLINKYARN_YARN_PENDING_HEARTBEAT_MS"
_AMRM_CLIENT = "org/apache/hadoop/yarn/client/api/AMRMClient"
_CONTAINER_REQUEST = f"L{_AMRM_CLIENT}$ContainerRequest;"
# skein's classes that call what the heartbeat helper stands in for.
ALLOCATOR_CLASS = "com/anaconda/skein/ApplicationMaster$3.class"
SERVICE_TRACKER_CLASS = "com/anaconda/skein/ApplicationMaster$ServiceTracker.class"


def call_heartbeat_helper(application_master: bytes) -> bytes:
    """skein's ApplicationMaster class with its one Math.max(II)I call and its one
    Math.min(JJ)J call, in

        idleHeartbeat = Math.min(5000, Math.max(0, conf.getInt(
            "yarn.am.liveness-monitor.expiry-interval-ms", 600000) / 2));
        pendingHeartbeat = Math.min(1000, idleHeartbeat);

    going to our helper: skein's allocator asks the ResourceManager for containers every
    idleHeartbeat ms while none is pending, every pendingHeartbeat ms while one is."""
    capped_idle = redirect_call(application_master, ("java/lang/Math", "max", "(II)I"),
                                HEARTBEAT_HELPER, "(II)I", opcode=_INVOKESTATIC)
    return redirect_call(capped_idle, ("java/lang/Math", "min", "(JJ)J"),
                         HEARTBEAT_HELPER, "(JJ)J", opcode=_INVOKESTATIC)


def call_sleep_helper(allocator: bytes) -> bytes:
    """skein's allocator thread (ApplicationMaster$3) with its one Thread.sleep(J)V, the
    wait between two calls of YARN's allocate, going to our helper, which a new
    container request cuts short."""
    return redirect_call(allocator, ("java/lang/Thread", "sleep", "(J)V"),
                         HEARTBEAT_HELPER, "(J)V", opcode=_INVOKESTATIC)


def call_request_helper(service_tracker: bytes) -> bytes:
    """skein's ApplicationMaster$ServiceTracker with its one
    AMRMClient.addContainerRequest call going to our helper, which wakes the allocator."""
    return redirect_call(service_tracker, (_AMRM_CLIENT, "addContainerRequest",
                                           f"({_CONTAINER_REQUEST})V"),
                         HEARTBEAT_HELPER, f"(L{_AMRM_CLIENT};{_CONTAINER_REQUEST})V")


def heartbeat_helper_class() -> bytes:
    """The class file of com.anaconda.skein.FlinkyarnHeartbeat:

        public static volatile Thread allocator;

        // Math.max, capped by yarn.heartbeat.interval (ms) from the environment.
        public static int max(int a, int b) {
            int value = Math.max(a, b);
            try {
                return Math.min(value, Integer.parseInt(System.getenv(HEARTBEAT_ENV)));
            } catch (Exception unset) {  // absent or not a number: skein's own
                return value;
            }
        }

        // Math.min, capped by yarn.heartbeat.container-request-interval (ms).
        public static long min(long a, long b) {
            long value = Math.min(a, b);
            try {
                return Math.min(value, Long.parseLong(System.getenv(PENDING_HEARTBEAT_ENV)));
            } catch (Exception unset) {
                return value;
            }
        }

        // The allocator's wait: up to ms, less when a container is requested meanwhile
        // (or was since the last wait). An interrupt ends it as it ends Thread.sleep.
        public static void sleep(long ms) throws InterruptedException {
            allocator = Thread.currentThread();
            LockSupport.parkUntil(System.currentTimeMillis() + ms);
            Thread.sleep(0L);  // throws InterruptedException if interrupted, as skein expects
        }

        public static void addContainerRequest(AMRMClient client, ContainerRequest request) {
            client.addContainerRequest(request);
            LockSupport.unpark(allocator);  // nothing when null
        }
    """
    pool = [
        _utf8("Code"),                                                # 5
        _utf8("max"),                                                 # 6
        _utf8("(II)I"),                                               # 7
        _utf8("java/lang/Math"),                                      # 8
        struct.pack(">BH", _CLASS, 8),                                # 9
        struct.pack(">BHH", _NAME_AND_TYPE, 6, 7),                    # 10
        struct.pack(">BHH", _METHODREF, 9, 10),                       # 11: Math.max
        _utf8("min"),                                                 # 12
        struct.pack(">BHH", _NAME_AND_TYPE, 12, 7),                   # 13
        struct.pack(">BHH", _METHODREF, 9, 13),                       # 14: Math.min
        _utf8(HEARTBEAT_ENV),                                         # 15
        struct.pack(">BH", _STRING, 15),                              # 16
        *_method_ref(17, "java/lang/System", "getenv",                # 17-22: System.getenv
                     "(Ljava/lang/String;)Ljava/lang/String;"),
        *_method_ref(23, "java/lang/Integer", "parseInt",             # 23-28: Integer.parseInt
                     "(Ljava/lang/String;)I"),
        _utf8("java/lang/Exception"),                                 # 29
        struct.pack(">BH", _CLASS, 29),                               # 30
        _utf8("(JJ)J"),                                               # 31
        struct.pack(">BHH", _NAME_AND_TYPE, 12, 31),                  # 32
        struct.pack(">BHH", _METHODREF, 9, 32),                       # 33: Math.min(JJ)J
        _utf8(PENDING_HEARTBEAT_ENV),                                 # 34
        struct.pack(">BH", _STRING, 34),                              # 35
        *_method_ref(36, "java/lang/Long", "parseLong",               # 36-41: Long.parseLong
                     "(Ljava/lang/String;)J"),
        _utf8("sleep"),                                               # 42
        _utf8("(J)V"),                                                # 43
        _utf8("java/lang/Thread"),                                    # 44
        struct.pack(">BH", _CLASS, 44),                               # 45
        struct.pack(">BHH", _NAME_AND_TYPE, 42, 43),                  # 46
        struct.pack(">BHH", _METHODREF, 45, 46),                      # 47: Thread.sleep
        _utf8("currentThread"),                                       # 48
        _utf8("()Ljava/lang/Thread;"),                                # 49
        struct.pack(">BHH", _NAME_AND_TYPE, 48, 49),                  # 50
        struct.pack(">BHH", _METHODREF, 45, 50),                      # 51: Thread.currentThread
        _utf8("allocator"),                                           # 52
        _utf8("Ljava/lang/Thread;"),                                  # 53
        struct.pack(">BHH", _NAME_AND_TYPE, 52, 53),                  # 54
        struct.pack(">BHH", _FIELDREF, 2, 54),                        # 55: allocator
        _utf8("java/util/concurrent/locks/LockSupport"),              # 56
        struct.pack(">BH", _CLASS, 56),                               # 57
        _utf8("parkUntil"),                                           # 58
        struct.pack(">BHH", _NAME_AND_TYPE, 58, 43),                  # 59
        struct.pack(">BHH", _METHODREF, 57, 59),                      # 60: LockSupport.parkUntil
        _utf8("unpark"),                                              # 61
        _utf8("(Ljava/lang/Thread;)V"),                               # 62
        struct.pack(">BHH", _NAME_AND_TYPE, 61, 62),                  # 63
        struct.pack(">BHH", _METHODREF, 57, 63),                      # 64: LockSupport.unpark
        _utf8("currentTimeMillis"),                                   # 65
        _utf8("()J"),                                                 # 66
        struct.pack(">BHH", _NAME_AND_TYPE, 65, 66),                  # 67
        struct.pack(">BHH", _METHODREF, 18, 67),                      # 68: System.currentTimeMillis
        _utf8("addContainerRequest"),                                 # 69
        _utf8(f"({_CONTAINER_REQUEST})V"),                            # 70
        _utf8(_AMRM_CLIENT),                                          # 71
        struct.pack(">BH", _CLASS, 71),                               # 72
        struct.pack(">BHH", _NAME_AND_TYPE, 69, 70),                  # 73
        struct.pack(">BHH", _METHODREF, 72, 73),                      # 74: AMRMClient.addContainerRequest
        _utf8(f"(L{_AMRM_CLIENT};{_CONTAINER_REQUEST})V"),            # 75
    ]
    capped_max = bytes([
        0x1A, 0x1B,        # 0: iload_0, iload_1
        0xB8, 0, 11,       # 2: invokestatic Math.max
        0x3D,              # 5: istore_2 (value)
        0x1C,              # 6: iload_2
        0x12, 16,          # 7: ldc HEARTBEAT_ENV
        0xB8, 0, 22,       # 9: invokestatic System.getenv
        0xB8, 0, 28,       # 12: invokestatic Integer.parseInt
        0xB8, 0, 14,       # 15: invokestatic Math.min
        0xAC,              # 18: ireturn
        0x57,              # 19: pop (the exception)
        0x1C,              # 20: iload_2
        0xAC,              # 21: ireturn
    ])
    capped_min = bytes([
        0x1E, 0x20,        # 0: lload_0, lload_2
        0xB8, 0, 33,       # 2: invokestatic Math.min(JJ)J
        0x37, 4,           # 5: lstore 4 (value)
        0x16, 4,           # 7: lload 4
        0x12, 35,          # 9: ldc PENDING_HEARTBEAT_ENV
        0xB8, 0, 22,       # 11: invokestatic System.getenv
        0xB8, 0, 41,       # 14: invokestatic Long.parseLong
        0xB8, 0, 33,       # 17: invokestatic Math.min(JJ)J
        0xAD,              # 20: lreturn
        0x57,              # 21: pop (the exception)
        0x16, 4,           # 22: lload 4
        0xAD,              # 24: lreturn
    ])
    sleep = bytes([
        0xB8, 0, 51,       # 0: invokestatic Thread.currentThread
        0xB3, 0, 55,       # 3: putstatic allocator
        0xB8, 0, 68,       # 6: invokestatic System.currentTimeMillis
        0x1E,              # 9: lload_0
        0x61,              # 10: ladd
        0xB8, 0, 60,       # 11: invokestatic LockSupport.parkUntil
        0x09,              # 14: lconst_0
        0xB8, 0, 47,       # 15: invokestatic Thread.sleep
        0xB1,              # 18: return
    ])
    request = bytes([
        0x2A, 0x2B,        # 0: aload_0, aload_1
        0xB6, 0, 74,       # 2: invokevirtual AMRMClient.addContainerRequest
        0xB2, 0, 55,       # 5: getstatic allocator
        0xB8, 0, 64,       # 8: invokestatic LockSupport.unpark
        0xB1,              # 11: return
    ])
    allocator = struct.pack(">HHHH", 0x0049, 52, 53, 0)  # public static volatile
    return class_file(
        HEARTBEAT_HELPER, pool, 6, 7, capped_max, max_stack=2, max_locals=3,
        exceptions=struct.pack(">HHHH", 6, 19, 19, 30), handlers=1,  # [6, 19) -> 19
        more_methods=(
            method_info(12, 31, capped_min, max_stack=4, max_locals=6,
                        exceptions=struct.pack(">HHHH", 7, 21, 21, 30), handlers=1),
            method_info(42, 43, sleep, max_stack=4, max_locals=2),
            method_info(69, 75, request, max_stack=2, max_locals=2)),
        fields=(allocator,))


# ------------------------------------------------ an end that no other attempt could change

LAST_ATTEMPT_HELPER = "com/anaconda/skein/FlinkyarnLastAttempt"
LAST_ATTEMPT_HELPER_FILE = f"{LAST_ATTEMPT_HELPER}.class"
# In the AppMaster container's environment of our applications: the AppMaster leaves
# FINAL_END_FILE for every real end (yarn_am/yarn_entrypoint.py).
FINAL_END_ENV = "FLINKYARN_FINAL_END_BY_FILE"
_ATTEMPT_ID = "org/apache/hadoop/yarn/api/records/ApplicationAttemptId"
_GET_ATTEMPT_ID = "getAttemptId"


def call_last_attempt_helper(application_master: bytes) -> bytes:
    """skein's ApplicationMaster class with its one ApplicationAttemptId.getAttemptId()
    call, in its exit hook's

        int currentAttempt = containerId.getApplicationAttemptId().getAttemptId();
        ...
        if (finalStatus == SUCCEEDED || currentAttempt >= maxAttempts) { unregister }
        else { "will retry": YARN starts the next attempt }

    going to our helper."""
    return redirect_call(application_master, (_ATTEMPT_ID, _GET_ATTEMPT_ID, "()I"),
                         LAST_ATTEMPT_HELPER, f"(L{_ATTEMPT_ID};)I")


def last_attempt_helper_class() -> bytes:
    """The class file of com.anaconda.skein.FlinkyarnLastAttempt: the largest int when the
    AppMaster (Python, in the same working folder) left FINAL_END_FILE, which makes skein
    treat the attempt as the last (it unregisters and removes the application's folder);
    else, in an AppMaster of ours (FINAL_END_ENV set: it leaves that file for every real
    end), 0, which makes skein leave the decision to YARN; else (another skein
    application) the attempt's number, as skein has it. skein's own count knows nothing
    of the attempt-failures validity interval: stopped by a signal in attempt 2 of 2, it
    removed the application's folder, and the third attempt YARN then started (the
    failures far enough apart) could not start:

        public static int getAttemptId(ApplicationAttemptId id) {
            if (Files.exists(Paths.get(FINAL_END_FILE, new String[0]), new LinkOption[0]))
                return Integer.MAX_VALUE;
            if (System.getenv(FINAL_END_ENV) != null)
                return 0;
            return id.getAttemptId();
        }
    """
    pool = [
        _utf8("Code"),                                                # 5
        _utf8(_GET_ATTEMPT_ID),                                       # 6
        _utf8(f"(L{_ATTEMPT_ID};)I"),                                 # 7
        *_path_of(FINAL_END_FILE),                                   # 8-17
        _utf8("java/nio/file/Files"),                                 # 18
        struct.pack(">BH", _CLASS, 18),                               # 19
        _utf8("exists"),                                              # 20
        _utf8("(Ljava/nio/file/Path;[Ljava/nio/file/LinkOption;)Z"),  # 21
        struct.pack(">BHH", _NAME_AND_TYPE, 20, 21),                  # 22
        struct.pack(">BHH", _METHODREF, 19, 22),                      # 23: Files.exists
        _utf8("java/nio/file/LinkOption"),                            # 24
        struct.pack(">BH", _CLASS, 24),                               # 25
        struct.pack(">Bi", _INTEGER, 2**31 - 1),                      # 26: Integer.MAX_VALUE
        _utf8(_ATTEMPT_ID),                                           # 27
        struct.pack(">BH", _CLASS, 27),                               # 28
        _utf8("()I"),                                                 # 29
        struct.pack(">BHH", _NAME_AND_TYPE, 6, 29),                   # 30
        struct.pack(">BHH", _METHODREF, 28, 30),                      # 31: id.getAttemptId
        _utf8(FINAL_END_ENV),                                         # 32
        struct.pack(">BH", _STRING, 32),                              # 33
        *_method_ref(34, "java/lang/System", "getenv",                # 34-39: System.getenv
                     "(Ljava/lang/String;)Ljava/lang/String;"),
    ]
    code = bytes([
        0x12, 11,          # 0: ldc FINAL_END_FILE
        0x03,              # 2: iconst_0
        0xBD, 0, 9,        # 3: anewarray String
        0xB8, 0, 17,       # 6: invokestatic Paths.get
        0x03,              # 9: iconst_0
        0xBD, 0, 25,       # 10: anewarray LinkOption
        0xB8, 0, 23,       # 13: invokestatic Files.exists
        0x99, 0, 6,        # 16: ifeq 22
        0x12, 26,          # 19: ldc Integer.MAX_VALUE
        0xAC,              # 21: ireturn
        0x12, 33,          # 22: ldc FINAL_END_ENV
        0xB8, 0, 39,       # 24: invokestatic System.getenv
        0xC6, 0, 5,        # 27: ifnull 32
        0x03,              # 30: iconst_0
        0xAC,              # 31: ireturn
        0x2A,              # 32: aload_0
        0xB6, 0, 31,       # 33: invokevirtual ApplicationAttemptId.getAttemptId
        0xAC,              # 36: ireturn
    ])
    return class_file(LAST_ATTEMPT_HELPER, pool, 6, 7, code, max_stack=2, max_locals=1)
