"""What a job's tasks printed: the stdout and stderr of PySpark drivers, kept by the
JobMaster for attached clients (`GET /jobs/{id}/output`), `flinkyarn logs` and the
dashboard's tail.

A bounded log of chunks, each numbered in arrival order. A reader asks for what came
after the last number it saw; when the log has dropped older chunks to stay within its
bound, the answer says how many characters the reader missed, so nothing is lost
silently. The full text is also in the TaskExecutor's container log.
"""

from __future__ import annotations

from collections import deque

from flinkyarn.gateways.dispatcher import JobOutputView, OutputLine

LIMIT_CHARS = 4 * 1024 * 1024      # kept while the job runs
ENDED_LIMIT_CHARS = 256 * 1024     # kept after it ended (a session keeps many jobs)
TAIL_LINES = 20


class JobOutput:
    def __init__(self, limit_chars: int = LIMIT_CHARS) -> None:
        self._chunks: deque[OutputLine] = deque()
        self._limit = limit_chars
        self._chars = 0
        self.next_seq = 0
        self.dropped_chars = 0
        self.read_up_to = 0           # the highest `after` a reader has asked with
        self.last_read: float | None = None

    def append(self, stream: str, text: str) -> None:
        if not text:
            return
        self._chunks.append(OutputLine(self.next_seq, stream, text))
        self.next_seq += 1
        self._chars += len(text)
        self._trim()

    def _trim(self) -> None:
        while self._chars > self._limit and len(self._chunks) > 1:
            dropped = self._chunks.popleft()
            self._chars -= len(dropped.text)
            self.dropped_chars += len(dropped.text)

    def shrink(self, limit_chars: int = ENDED_LIMIT_CHARS) -> None:
        self._limit = min(self._limit, limit_chars)
        self._trim()

    def read(self, after: int, now: float, max_chars: int = 1024 * 1024) -> JobOutputView:
        """The chunks numbered `after` and up (at most about `max_chars` characters);
        `missed` counts characters dropped before the reader got them."""
        self.read_up_to = max(self.read_up_to, after)
        self.last_read = now
        chunks: list[OutputLine] = []
        size = 0
        first = self._chunks[0].seq if self._chunks else self.next_seq
        missed = self.dropped_chars if after < first and self.dropped_chars else 0
        for chunk in self._chunks:
            if chunk.seq < after:
                continue
            if chunks and size + len(chunk.text) > max_chars:
                break
            chunks.append(chunk)
            size += len(chunk.text)
        following = chunks[-1].seq + 1 if chunks else max(after, first)
        return JobOutputView(chunks, following, missed)

    def tail(self, lines: int = TAIL_LINES) -> str:
        """The last `lines` lines, both streams as they were written."""
        text, kept = [], 0
        for chunk in reversed(self._chunks):
            text.append(chunk.text)
            kept += chunk.text.count("\n")
            if kept > lines:
                break
        joined = "".join(reversed(text))
        return "\n".join(joined.rstrip("\n").split("\n")[-lines:]) if joined else ""
