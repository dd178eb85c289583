"""What the client and the TaskExecutor both know of Spark: the class-data archive of the
Spark JVM (`class_data`: its naming, key, folder and lock) and how Spark's Python worker
daemon is named and shipped (`python_daemon`). The Spark integration itself, and every
process it runs, is the TaskExecutor's (taskexecutor/spark/)."""
