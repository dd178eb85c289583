"""flinkyarn: Apache Flink's runtime architecture in Python, on Hadoop YARN.

This is the core package the three roles share (the client in `yarn_client`, the
AppMaster in `yarn_am`, the TaskExecutor in `taskexecutor`), and what users import.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flinkyarn.pipeline.api import Pipeline as Pipeline
    from flinkyarn.pipeline.event_time import SlidingEventTimeWindows as SlidingEventTimeWindows
    from flinkyarn.pipeline.event_time import TumblingEventTimeWindows as TumblingEventTimeWindows
    from flinkyarn.pipeline.keyed_process import KeyedProcessFunction as KeyedProcessFunction

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # `from flinkyarn import Pipeline` without importing pyarrow for every process that
    # only needs the core (the AppMaster, the CLI).
    if name == "Pipeline":
        from flinkyarn.pipeline.api import Pipeline
        return Pipeline
    if name in ("TumblingEventTimeWindows", "SlidingEventTimeWindows"):
        from flinkyarn.pipeline import event_time
        return getattr(event_time, name)
    if name == "KeyedProcessFunction":
        from flinkyarn.pipeline.keyed_process import KeyedProcessFunction
        return KeyedProcessFunction
    raise AttributeError(f"module 'flinkyarn' has no attribute {name!r}")
