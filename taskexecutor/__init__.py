"""The TaskExecutor: slots, tasks, result partitions, input gates, the PySpark bridge."""
