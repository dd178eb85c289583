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
    pyspark_patches      drivers, the TaskExecutor     pyspark's private seams, all of them

What the client needs too (the class-data archive's naming, the daemon's names) is in
flinkyarn/spark/. This package's __init__ imports nothing: Spark's Python daemon and
the drivers import it before anything else."""
