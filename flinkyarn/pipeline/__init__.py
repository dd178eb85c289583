"""Pipelines: the API users write (`Pipeline`, `DataStream`), the StreamGraph and the
JobGraph it becomes, and the operators that run inside TaskExecutors."""
