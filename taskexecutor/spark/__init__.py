"""The TaskExecutor's Spark integration: one module for each process it runs, and the
TaskExecutor's own side of each.

    module               runs in                       what
    bridge               the TaskExecutor              its local SparkSession (Spark stages)
    script_task          the TaskExecutor              a PySparkScript's task: starts and
                                                       follows its driver process
    warm_pool            the TaskExecutor              the warm drivers kept ready
    driver               a PySpark driver              python -m taskexecutor.spark.driver
    warm_driver          a warm PySpark driver         python -m taskexecutor.spark.warm_driver
    class_data_trainer   the class-data trainer        python -m taskexecutor.spark.class_data_trainer
    daemon               Spark's Python worker daemon  spark.python.daemon.module

What the client needs too (the class-data archive's naming, the daemon's names) is in
flinkyarn/spark/. Nothing here is imported by a process that does not run it: this
package's __init__ stays empty, as Spark's daemon imports it."""
