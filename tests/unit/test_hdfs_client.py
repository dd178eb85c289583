"""flinkyarn/hdfs.py's wrapper of hdfs-native's client: a call that no NameNode took
(a failover under way) is tried again until one does; a refusal is an OSError that
says what the NameNode said, on one line, and is not tried again."""

from __future__ import annotations

import pytest

from flinkyarn import hdfs, retry

STANDBY = ('RPCError("org.apache.hadoop.ipc.StandbyException", "Operation category READ is '
           'not supported in state standby.\\n\\tat org.apache.hadoop.hdfs...")')
DENIED = ('RPCError("org.apache.hadoop.security.AccessControlException", "Permission denied: '
          'user=bob, access=WRITE, inode=\\"/user\\":root:supergroup:drwxr-xr-x\\n\\tat org...")')


class FakeClient:
    """Raises the given errors, one per call, then answers."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors, self.calls = list(errors), 0

    def get_file_info(self, path: str) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return f"status of {path}"


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(hdfs, "FAILOVER_PAUSES", retry.Backoff(0.01, 0.02))


def test_a_call_no_namenode_took_is_tried_again_until_one_does(caplog):
    client = FakeClient(RuntimeError(STANDBY), ConnectionRefusedError(111, "Connection refused"),
                        OSError("Connection refused (os error 111)"))
    assert hdfs._FailingOver(client, "hdfs://ns").get_file_info("/a") == "status of /a"
    assert client.calls == 4
    [said] = [r.getMessage() for r in caplog.records]  # once, at the first retry
    assert "hdfs://ns: no active NameNode took get_file_info (StandbyException: Operation " \
           "category READ is not supported in state standby.)" in said


def test_after_the_patience_the_last_refusal_is_raised(monkeypatch):
    monkeypatch.setattr(hdfs, "FAILOVER_PATIENCE", 0.1)
    client = FakeClient(*[RuntimeError(STANDBY)] * 1000)
    with pytest.raises(hdfs.NoActiveNameNode, match="^StandbyException: Operation category READ"):
        hdfs._FailingOver(client, "hdfs://ns").get_file_info("/a")
    assert 2 < client.calls < 1000


def test_a_refusal_is_an_oserror_on_one_line_and_not_tried_again():
    client = FakeClient(RuntimeError(DENIED))
    with pytest.raises(PermissionError) as raised:
        hdfs._FailingOver(client, "hdfs://ns").get_file_info("/user/x")
    assert str(raised.value) == ('AccessControlException: Permission denied: user=bob, '
                                 'access=WRITE, inode="/user":root:supergroup:drwxr-xr-x')
    assert client.calls == 1
    client = FakeClient(FileNotFoundError("/nope"))
    with pytest.raises(FileNotFoundError):
        hdfs._FailingOver(client, "hdfs://ns").get_file_info("/nope")
    assert client.calls == 1
