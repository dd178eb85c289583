"""flinkyarn: Apache Flink's runtime architecture in Python, on Hadoop YARN.

This is the core package the three roles share (the client in `yarn_client`, the
AppMaster in `yarn_am`, the TaskExecutor in `taskexecutor`), and what users import.
"""

__version__ = "0.1.0"
