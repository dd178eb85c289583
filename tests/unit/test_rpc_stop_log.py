"""What an RPC server's stop leaves in the log: grpc's record of a call handler it
cancelled is not an error of ours (a TaskExecutor stopped under load logged one, with a
traceback, for a heartbeat still in its handler after the grace period)."""

from __future__ import annotations

import asyncio
import logging
import sys

from flinkyarn.rpc.service import OwnStopCancellations


def test_grpcs_log_of_a_handler_cancelled_by_our_stop_is_dropped_and_nothing_else():
    def record(name: str, error: BaseException | None) -> logging.LogRecord:
        try:
            raise error or ValueError("x")
        except BaseException:
            exc_info = sys.exc_info() if error is not None else None
        return logging.LogRecord(name, logging.ERROR, __file__, 1, "Unexpected [%s] raised by "
                                 "servicer method [/taskexecutor/heartbeat_from_resource_manager]",
                                 ("CancelledError",), exc_info)
    keep = OwnStopCancellations().filter
    assert not keep(record("grpc._cython.cygrpc", asyncio.CancelledError()))
    assert keep(record("grpc._cython.cygrpc", RuntimeError("a real one")))
    assert keep(record("flinkyarn.rpc.service", asyncio.CancelledError()))
    assert keep(record("grpc._cython.cygrpc", None))
