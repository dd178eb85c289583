"""Every configuration option of flinkyarn, and the small configuration objects built
from them.

Keys are Flink's where Flink has the option. `conf/flinkyarn.yaml` lists each option
with its default and description; tests/unit/test_configuration.py keeps the two in step.
docs/configuration.md is generated from here (integration/make-config-docs);
tests/unit/test_config_docs.py fails when it is stale.
Components do not read options one by one while running: they build a frozen
configuration object once (`HeartbeatConfig.from_configuration(conf)`), which is where
rules spanning several options are checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from flinkyarn.configuration import (
    BOOL,
    DURATION,
    POSITIVE_DURATION,
    FRACTION,
    MEMORY_SIZE,
    POSITIVE_FLOAT,
    STRING,
    Configuration,
    ConfigurationError,
    OptionType,
    choice,
    integer,
    option,
    parse_duration,
)
from flinkyarn.jobgraph import InvalidJobGraph, JobGraph

PORT = integer(0, 65535)


def _deadline(text: str) -> float | None:
    """Seconds greater than 0, or None for empty text: no deadline."""
    if not text.strip():
        return None
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError("not greater than 0")
    return seconds


DEADLINE: OptionType[float | None] = OptionType(
    "Duration",
    "empty (no deadline) or a duration greater than 0 such as '10 min' or '1 h' (a plain number is milliseconds)",
    _deadline)
"""A deadline that may be left open (empty): in seconds, or None."""

# TaskExecutor resources
NUM_TASK_SLOTS = option(
    "taskmanager.numberOfTaskSlots", integer(1), "2",
    "Number of slots one TaskExecutor offers.")
TASK_MANAGER_CPU_CORES = option(
    "taskmanager.cpu.cores", POSITIVE_FLOAT, "2.0",
    "CPU cores of one TaskExecutor, shared by its slots.")
TASK_MANAGER_PROCESS_MEMORY = option(
    "taskmanager.memory.process.size", MEMORY_SIZE, "1 gb",
    "Memory of one TaskExecutor process, shared by its slots.")
TASK_MANAGER_SPARK_START_EAGERLY = option(
    "taskmanager.spark.start-eagerly", BOOL, "false",
    "Start each TaskExecutor's SparkSession as the TaskExecutor starts, not when its first "
    "Spark stage opens. The client sets it for the TaskExecutors it starts for a job with a "
    "Spark stage (local target, per-job on YARN).")
TASK_MANAGER_SPARK_JAVA_OPTIONS = option(
    "taskmanager.spark.java-options", STRING, "-XX:TieredStopAtLevel=1",
    "JVM options of each TaskExecutor's Spark JVM (its pipeline stages' SparkSession), "
    "after spark-defaults.conf's spark.driver.extraJavaOptions. The default compiles with "
    "C1 alone: on a few cores the session starts and runs its first queries about a "
    "third faster, while a long CPU-bound stage may run somewhat slower (empty: the "
    "JVM's own tiered compilation).")
TASK_MANAGER_SPARK_CDS_DIR = option(
    "taskmanager.spark.cds.dir", STRING, "auto",
    "Where TaskExecutors keep the class-data-sharing archive of their Spark JVM, made once "
    "per JDK and Spark (flinkyarn/spark/class_data.py): its classes load in a fraction of the "
    "time. auto: ~/.cache/flinkyarn/spark-cds for local processes and the client, which "
    "makes one for the environment it ships to YARN (in the background the first time) and "
    "ships it from then on; empty: none.")

JOB_MANAGER_PROCESS_MEMORY = option(
    "jobmanager.memory.process.size", MEMORY_SIZE, "768 mb",
    "Memory of the AppMaster process (its YARN container).")

# Heartbeats
HEARTBEAT_INTERVAL = option(
    "heartbeat.interval", DURATION, "10 s",
    "How often a component sends a heartbeat request to the components it monitors.")
HEARTBEAT_TIMEOUT = option(
    "heartbeat.timeout", DURATION, "50 s",
    "A monitored component that has not answered a heartbeat for this long is considered dead.")
HEARTBEAT_RPC_FAILURE_THRESHOLD = option(
    "heartbeat.rpc-failure-threshold", integer(-1), "2",
    "Consecutive heartbeat calls that cannot reach a target (its process is gone: connection refused) before it is declared dead without waiting for heartbeat.timeout; -1 turns this off. Calls that reach a frozen target and time out do not count.")

# Slots
SLOT_REQUEST_TIMEOUT = option(
    "slot.request.timeout", DURATION, "5 min",
    "How long a JobMaster's slot request may stay unfulfilled before it fails.")
SLOT_IDLE_TIMEOUT = option(
    "slot.idle.timeout", DURATION, "50 s",
    "How long a free slot stays cached in the JobMaster's SlotPool before it is released.")

# ResourceManager
TASK_MANAGER_TIMEOUT = option(
    "resourcemanager.taskmanager-timeout", DURATION, "30 s",
    "A TaskExecutor whose slots have all been free for this long is released.")
MAX_TASK_MANAGERS = option(
    "resourcemanager.max-taskmanagers", integer(1), "8",
    "The most TaskExecutors the ResourceManager runs at once, whatever starts them (local processes or YARN containers); it bounds the slots a job may need at once.",
    deprecated_keys=("resourcemanager.local.max-taskmanagers",))

# Registration of TaskExecutors and JobMasters at the ResourceManager
TASK_MANAGER_REGISTRATION_TIMEOUT = option(
    "taskmanager.registration.timeout", DURATION, "5 min",
    "A TaskExecutor that cannot register at the ResourceManager within this time exits.")
REGISTRATION_INITIAL_TIMEOUT = option(
    "cluster.registration.initial-timeout", DURATION, "100 ms",
    "Timeout of the first registration attempt; it doubles with each attempt that times out.")
REGISTRATION_MAX_TIMEOUT = option(
    "cluster.registration.max-timeout", DURATION, "30 s",
    "Upper bound of the doubling registration attempt timeout.")
REGISTRATION_ERROR_DELAY = option(
    "cluster.registration.error-delay", DURATION, "10 s",
    "Pause before retrying a registration at the ResourceManager whose attempt failed with an error (unreachable, or the call raised); a timed-out attempt is retried at once with a doubled timeout.")
REGISTRATION_REFUSED_DELAY = option(
    "cluster.registration.refused-registration-delay", DURATION, "30 s",
    "Pause before retrying a registration the ResourceManager refused (it answered that the request is invalid, forbidden or stale).")

# RPC (control plane)
RPC_MAX_MESSAGE_SIZE = option(
    "rpc.max-message-size", MEMORY_SIZE, "64 mb",
    "Largest control-plane message sent or accepted.")
RPC_ASK_TIMEOUT = option(
    "rpc.ask-timeout", DURATION, "10 s",
    "Timeout of one control-plane call.")

# Addresses and ports
JOB_MANAGER_RPC_ADDRESS = option(
    "jobmanager.rpc.address", STRING, "127.0.0.1",
    "Address the JobManager's RPC endpoint binds to and advertises.")
JOB_MANAGER_RPC_PORT = option(
    "jobmanager.rpc.port", PORT, "0",
    "Port of the JobManager's RPC endpoint; 0 picks any free port.")
TASK_MANAGER_HOST = option(
    "taskmanager.host", STRING, "127.0.0.1",
    "Address a TaskExecutor's RPC endpoint binds to and advertises.")
TASK_MANAGER_RPC_PORT = option(
    "taskmanager.rpc.port", PORT, "0",
    "Port of a TaskExecutor's RPC endpoint; 0 picks any free port.")

# Data plane
TASK_MANAGER_DATA_PORT = option(
    "taskmanager.data.port", PORT, "0",
    "Port of a TaskExecutor's Arrow Flight data server; 0 picks any free port.")
SUBPARTITION_MAX_BUFFERED_BYTES = option(
    "taskmanager.network.subpartition.max-buffered-bytes", MEMORY_SIZE, "8 mb",
    "Most bytes a pipelined subpartition buffers before its producer waits (backpressure).")
PARTITION_REQUEST_TIMEOUT = option(
    "taskmanager.network.partition-request.timeout", DURATION, "60 s",
    "How long a consumer waits for a producer's partition to become available.")
NETWORK_REQUEST_BACKOFF_INITIAL = option(
    "taskmanager.network.request-backoff.initial", DURATION, "20 ms",
    "First pause before a consumer asks a producer's TaskExecutor again for a partition not registered there yet; it doubles with each request.")
NETWORK_REQUEST_BACKOFF_MAX = option(
    "taskmanager.network.request-backoff.max", DURATION, "1 s",
    "Upper bound of the doubling pause between a consumer's requests for a partition not registered yet.")
IO_TMP_DIRS = option(
    "io.tmp.dirs", STRING, "",
    "Comma-separated folders for scratch files (spilled blocking partitions, tasks' scratch folders, Spark's local dirs and temporary files); empty: the container's LOCAL_DIRS on YARN, else the temporary folder (TMPDIR).")
MAX_PARALLELISM_UPPER_BOUND = 32768  # Flink's: a job's key groups are numbered in 15 bits
PIPELINE_MAX_PARALLELISM = option(
    "pipeline.max-parallelism", integer(-1, MAX_PARALLELISM_UPPER_BOUND), "-1",
    "A job's number of key groups (flinkyarn/key_groups.py), the largest parallelism a "
    "vertex may have and may be rescaled to from a savepoint, checked when the job is "
    "submitted; -1: the savepoint's the job resumes from, else Flink's default, 1.5 times "
    "the widest vertex's parallelism rounded up to a power of two, at least 128.")
PIPELINE_BATCH_SIZE = option(
    "pipeline.batch-size", integer(1), "65536",
    "Most rows per Arrow record batch that sources and operators emit.")

# REST endpoint and client
REST_ADDRESS = option(
    "rest.address", STRING, "127.0.0.1",
    "Address the JobManager's REST endpoint binds to and advertises.")
REST_PORT = option(
    "rest.port", PORT, "0",
    "Port of the JobManager's REST endpoint; 0 picks any free port.")
CLIENT_TIMEOUT = option(
    "client.timeout", DURATION, "60 s",
    "Timeout of one REST call from the client to the cluster (submit, status, cancel, output).")
DASHBOARD_MAX_CONNECTIONS = option(
    "dashboard.max-connections", integer(1), "64",
    "Most connections the dashboard serves at once; more are closed as they come.")
DASHBOARD_TIMEOUT = option(
    "dashboard.timeout", POSITIVE_DURATION, "10 s",
    "A dashboard connection not answered within this time of its opening or of its last answer (idle, or a request still incomplete) is closed.")

# Metrics
METRICS_REPORTERS = option(
    "metrics.reporters", STRING, "prom",
    "Comma-separated metric reporters each AppMaster and TaskExecutor starts: prom (a Prometheus endpoint, GET /metrics, advertised in the REST API's /overview) or none (empty).")
METRICS_TASK_IO = option(
    "metrics.task-io", BOOL, "true",
    "Whether each task counts its records and bytes in and out and its busy, backpressured and idle time (the job details, the dashboard and Prometheus show them). Off, they show zeros; bench/metrics_cost.py measures what counting costs.")
METRICS_PROMETHEUS_PORT = option(
    "metrics.reporter.prom.port", PORT, "0",
    "Port of the Prometheus endpoint of each AppMaster and TaskExecutor; 0 picks any free port (several TaskExecutors share a node).")

# Execution
EXECUTION_TARGET = option(
    "execution.target", choice("auto", "local", "yarn-per-job", "yarn-session"), "auto",
    "Where `flinkyarn run` runs jobs unless -t says: local processes, a YARN application per job, or a YARN session; auto: yarn-per-job when HADOOP_CONF_DIR has a yarn-site.xml, else local.")
EXECUTION_ATTACHED = option(
    "execution.attached", BOOL, "true",
    "Whether `flinkyarn run` on yarn-per-job waits for the job to finish and reports its result; false is --detached (print the application id and return).")

# YARN
YARN_APPLICATION_QUEUE = option(
    "yarn.application.queue", STRING, "default",
    "YARN queue applications are submitted to.")
YARN_APPLICATION_START_TIMEOUT = option(
    "yarn.application.start-timeout", DEADLINE, "",
    "How long the client waits, from the submission, for YARN to start the application's AppMaster before it kills the application; empty: as long as it takes, as Flink's and Spark's clients do. YARN keeps an application ACCEPTED while its queue has no room for the AppMaster; the client says why after 10 s and then every 30 s. An AppMaster that YARN runs has at most 5 min to answer.")
YARN_APPLICATION_NAME = option(
    "yarn.application.name", STRING, "",
    "Name of the YARN application; empty lets flinkyarn choose one.")
YARN_TAGS = option(
    "yarn.tags", STRING, "",
    "Comma-separated tags attached to the YARN application.")
YARN_STAGING_DIRECTORY = option(
    "yarn.staging-directory", STRING, "",
    "Folder on the cluster's default filesystem for flinkyarn's cache (the packed Python environment, its own code) and the applications' credentials; empty: /user/<user>/.flinkyarn.")
YARN_APPLICATION_ATTEMPTS = option(
    "yarn.application-attempts", integer(1), "2",
    "How many times YARN starts the AppMaster of an application (at most the ResourceManager's yarn.resourcemanager.am.max-attempts): a lost AppMaster comes back as the next attempt and its unfinished jobs run again (flinkyarn/job_store.py).")
YARN_HEARTBEAT_INTERVAL = option(
    "yarn.heartbeat.interval", POSITIVE_DURATION, "1 s",
    "How often the AppMaster calls YARN's ResourceManager while it has no container request pending (a new request is sent at once). Flink's default is 5 s, MapReduce's 1 s.")
YARN_CONTAINER_REQUEST_INTERVAL = option(
    "yarn.heartbeat.container-request-interval", POSITIVE_DURATION, "200 ms",
    "How often the AppMaster calls YARN's ResourceManager while a container request is pending, to take the container as soon as YARN allocates it (at most yarn.heartbeat.interval). Flink's default is 500 ms; Spark starts at 200 ms.")
YARN_ATTEMPT_FAILURES_VALIDITY_INTERVAL = option(
    "yarn.application-attempt-failures-validity-interval", DURATION, "10 s",
    "Only AppMaster failures within this time of each other count towards yarn.application-attempts; 0: every failure counts, however long ago (YARN's default).")
HA_STORAGE_DIR = option(
    "high-availability.storageDir", STRING, "",
    "Folder on the cluster's default filesystem where each application keeps what its next AppMaster attempt needs (its accepted jobs, their results, where it serves), in a folder per application; empty: <yarn.staging-directory>/ha.")
ARCHIVE_DIR = option(
    "jobmanager.archive.fs.dir", STRING, "",
    "Folder (local path or hdfs:// URL) where every application of a YARN target archives each job that ended, and itself, for `flinkyarn list` and `flinkyarn history-server` after the application is gone (one folder per application); empty: <yarn.staging-directory>/archive on HDFS. A shared history server needs a folder it can read.")
HISTORY_SERVER_ARCHIVE_DIRS = option(
    "historyserver.archive.fs.dir", STRING, "",
    "Comma-separated archive folders the history server (and `flinkyarn list` of ended applications) reads; empty: jobmanager.archive.fs.dir (or its default).")
HISTORY_SERVER_ADDRESS = option(
    "historyserver.web.address", STRING, "",
    "Host `flinkyarn history-server` binds to; empty: 127.0.0.1.")
HISTORY_SERVER_PORT = option(
    "historyserver.web.port", PORT, "8082",
    "Port of the history server (Flink's default).")
YARN_PROVIDED_LIB_DIRS = option(
    "yarn.provided.lib.dirs", STRING, "",
    "Comma-separated folders on the cluster's filesystem where prepared archives wait under their content-addressed names (environment-<digest>.tar, flinkyarn-code-<digest>.tar.gz); found there, nothing is uploaded.")
YARN_SHIP_FILES = option(
    "yarn.ship-files", STRING, "",
    "Comma-separated local files or folders localized into the working folder of every container (--files).")

# Python on the cluster
PYTHON_ARCHIVES = option(
    "python.archives", STRING, "",
    "Comma-separated archives (local or hdfs://, optionally path#name) YARN unpacks into every TaskExecutor's container (-pyarch); with python.executable, a prepared environment used instead of the packed client environment.")
PYTHON_EXECUTABLE = option(
    "python.executable", STRING, "",
    "Interpreter the TaskExecutors run (-pyexec): a path inside an archive of python.archives (NAME/bin/python) or an absolute path present on every node; empty: the shipped client environment's.")
PYTHON_FILES = option(
    "python.files", STRING, "",
    "Comma-separated Python files, folders, .zip or .egg files put on the PYTHONPATH of the program and of every container (--py-files, -pyfs).")

# PySpark scripts (flinkyarn run --pyspark)
SECURITY_KERBEROS_KEYTAB = option(
    "security.kerberos.login.keytab", STRING, "",
    "On a Kerberos-secured Hadoop: the keytab the client logs in from (with security.kerberos.login.principal); empty: the ticket cache of kinit.")
SECURITY_KERBEROS_PRINCIPAL = option(
    "security.kerberos.login.principal", STRING, "",
    "The principal of security.kerberos.login.keytab.")
SECURITY_KERBEROS_USE_TICKET_CACHE = option(
    "security.kerberos.login.use-ticket-cache", BOOL, "true",
    "Whether the client may use the ticket cache of kinit when no keytab is named.")
SECURITY_DELEGATION_TOKENS_ENABLED = option(
    "security.delegation.tokens.enabled", BOOL, "true",
    "Whether an application with a keytab (security.kerberos.login.keytab, shipped owner-only to its AppMaster) obtains fresh delegation tokens before the old ones expire and hands them to its TaskExecutors, so that it outlives any one token.")
SECURITY_DELEGATION_TOKENS_RENEWAL_TIME_RATIO = option(
    "security.delegation.tokens.renewal.time-ratio", FRACTION, "0.75",
    "When fresh delegation tokens are obtained: this fraction of the time until the current ones expire.")
SECURITY_DELEGATION_TOKENS_RENEWAL_RETRY_BACKOFF = option(
    "security.delegation.tokens.renewal.retry.backoff", DURATION, "1 min",
    "How long the AppMaster waits before it tries again when obtaining delegation tokens failed.")
PYSPARK_MASTER = option(
    "pyspark.master", STRING, "",
    "Where a PySpark script's Spark runs: yarn (executors in YARN containers of the same queue), local (local[slot cores] inside the slot), or any Spark master URL; empty: yarn on a YARN target, local on the local target.")
PYSPARK_SHOW_SPARK_LOGS = option(
    "pyspark.show-spark-logs", BOOL, "false",
    "Show the Spark driver's own log (WARN and above, as spark-submit does) on the client's terminal; otherwise it goes to spark-<job>.log in the TaskExecutor's logs.")
PYSPARK_MAX_EXECUTORS = option(
    "pyspark.dynamic-allocation.max-executors", integer(1), "4",
    "Most Spark executors a script's dynamic allocation asks YARN for (spark.dynamicAllocation.maxExecutors, which a --conf overrides); it starts with up to 2 and asks for more once tasks waited 15 s (spark.dynamicAllocation.schedulerBacklogTimeout), then twice as many every 5 s (sustainedSchedulerBacklogTimeout).")
PYSPARK_WARM_DRIVERS = option(
    "pyspark.warm-drivers", integer(0), "1",
    "Drivers a TaskExecutor keeps started for its next pyspark.master=local script once it ran one: pyspark's JVM up and warmed by a throwaway SparkSession, so the script's own SparkContext starts in a fraction of a second; 0: none. Each is an idle JVM and Python (about 300 MB) beside the slots.")
PYSPARK_PYTHON_ARCHIVE = option(
    "pyspark.yarn.python-archive", STRING, "",
    "The archive (hdfs://...#NAME) Spark's executors on YARN unpack for their Python; empty: the TaskExecutors' own environment (the client fills it in).")
PYSPARK_CLASS_DATA_ARCHIVE = option(
    "pyspark.yarn.class-data-archive", STRING, "",
    "The class-data archive (hdfs://...) Spark's executors on YARN map, made for the TaskExecutors' environment (flinkyarn/spark/class_data.py); empty: the one the client ships, if any, when the executors run that environment (the client fills it in).")
PYSPARK_PYTHON = option(
    "pyspark.yarn.python", STRING, "",
    "The interpreter of Spark's executors on YARN, inside pyspark.yarn.python-archive (./NAME/bin/python); empty: the TaskExecutors' own (the client fills it in).")
TASK_CANCELLATION_INTERVAL = option(
    "task.cancellation.interval", POSITIVE_DURATION, "30 s",
    "How often a TaskExecutor logs where a cancelled task that has not stopped is (its thread's stack) and asks it again.")
TASK_CANCELLATION_TIMEOUT = option(
    "task.cancellation.timeout", DURATION, "30 s",
    "How long a cancelled task may take to stop (a PySpark driver: with its Spark application) before its TaskExecutor fails fatally and exits, freeing its slots; 0 waits for ever.")

# Fault tolerance
BLOCKLIST_ENABLED = option(
    "cluster.resource-blocklist.enabled", BOOL, "true",
    "Whether a job stops taking slots of a TaskExecutor its task failures keep coming from (Flink's blocklist): it is blocked for the job's new slots and its slots go back.")
BLOCKLIST_TASK_FAILURES = option(
    "cluster.resource-blocklist.task-failures", integer(1), "2",
    "How many of a job's task failures (the task's own, not a lost input's) on one TaskExecutor block that TaskExecutor for the job; counted within cluster.resource-blocklist.item.timeout.")
BLOCKLIST_ITEM_TIMEOUT = option(
    "cluster.resource-blocklist.item.timeout", POSITIVE_DURATION, "10 min",
    "How long a TaskExecutor stays blocked for a job, and how far back its task failures count.")
FAILOVER_STRATEGY = option(
    "jobmanager.execution.failover-strategy", choice("full", "region", "restart-individual"), "region",
    "Which tasks restart after a failure: the whole job, the failed pipelined region, or only the failed task (jobs without data exchange).")
RESTART_STRATEGY = option(
    "restart-strategy.type", choice("none", "fixed-delay", "exponential-delay", "failure-rate"), "none",
    "How a failed job restarts: never, after a fixed delay, after a growing delay, or while failures stay rare.")
FIXED_DELAY_ATTEMPTS = option(
    "restart-strategy.fixed-delay.attempts", integer(0), "1",
    "fixed-delay: how many restarts are attempted before the job is declared failed.")
FIXED_DELAY_DELAY = option(
    "restart-strategy.fixed-delay.delay", DURATION, "1 s",
    "fixed-delay: pause between a failure and the restart it causes.")
EXPONENTIAL_DELAY_INITIAL_BACKOFF = option(
    "restart-strategy.exponential-delay.initial-backoff", DURATION, "1 s",
    "exponential-delay: pause before the first restart, and after a reset.")
EXPONENTIAL_DELAY_MAX_BACKOFF = option(
    "restart-strategy.exponential-delay.max-backoff", DURATION, "5 min",
    "exponential-delay: the pause between restarts never grows beyond this.")
EXPONENTIAL_DELAY_BACKOFF_MULTIPLIER = option(
    "restart-strategy.exponential-delay.backoff-multiplier", POSITIVE_FLOAT, "2.0",
    "exponential-delay: factor the pause is multiplied by after each failure (at least 1).")
EXPONENTIAL_DELAY_RESET_BACKOFF_THRESHOLD = option(
    "restart-strategy.exponential-delay.reset-backoff-threshold", DURATION, "1 h",
    "exponential-delay: after this long without a failure (past the last pause), the pause goes back to initial-backoff.")
FAILURE_RATE_MAX_FAILURES_PER_INTERVAL = option(
    "restart-strategy.failure-rate.max-failures-per-interval", integer(1), "1",
    "failure-rate: most restarts within one failure-rate-interval before the job is declared failed.")
FAILURE_RATE_INTERVAL = option(
    "restart-strategy.failure-rate.failure-rate-interval", DURATION, "1 min",
    "failure-rate: the time window in which failures are counted.")
FAILURE_RATE_DELAY = option(
    "restart-strategy.failure-rate.delay", DURATION, "1 s",
    "failure-rate: pause between a failure and the restart it causes.")


# Checkpoints (streaming jobs; a job may set these for itself)
CHECKPOINTING_INTERVAL = option(
    "execution.checkpointing.interval", DURATION, "0 s",
    "How often the CheckpointCoordinator triggers a checkpoint of a streaming job; 0: no checkpoints.")
CHECKPOINTING_TIMEOUT = option(
    "execution.checkpointing.timeout", POSITIVE_DURATION, "10 min",
    "A checkpoint not completed within this time after its trigger is aborted.")
CHECKPOINTING_MIN_PAUSE = option(
    "execution.checkpointing.min-pause", DURATION, "0 s",
    "The least time between the end of one checkpoint and the trigger of the next.")
CHECKPOINTING_MAX_CONCURRENT = option(
    "execution.checkpointing.max-concurrent-checkpoints", integer(1), "1",
    "Most checkpoints in progress at once.")
CHECKPOINTING_TOLERABLE_FAILURES = option(
    "execution.checkpointing.tolerable-failed-checkpoints", integer(0), "0",
    "Checkpoint failures in a row (declined, timed out, not written) a job tolerates; one more fails it over.")
CHECKPOINTS_DIRECTORY = option(
    "state.checkpoints.dir", STRING, "",
    "Where checkpoints are written (a folder per job; hdfs:// or a local path); empty: checkpoints/ under the user's staging directory on YARN, else in the client's folder (~/.flinkyarn, or FLINKYARN_HOME).")
CHECKPOINTS_RETENTION = option(
    "execution.checkpointing.externalized-checkpoint-retention",
    choice("NO_EXTERNALIZED_CHECKPOINTS", "DELETE_ON_CANCELLATION", "RETAIN_ON_CANCELLATION"),
    "NO_EXTERNALIZED_CHECKPOINTS",
    "What becomes of a job's checkpoints when it ends: NO_EXTERNALIZED_CHECKPOINTS deletes them; DELETE_ON_CANCELLATION keeps them when the job failed; RETAIN_ON_CANCELLATION also when it was cancelled. A finished job's are deleted.")
SAVEPOINTS_DIRECTORY = option(
    "state.savepoints.dir", STRING, "",
    "Where `flinkyarn savepoint` and `stop --savepoint` put savepoints unless told; empty: savepoints/ under the user's staging directory on YARN, else in the client's folder (~/.flinkyarn, or FLINKYARN_HOME).")
SAVEPOINT_PATH = option(
    "execution.savepoint.path", STRING, "",
    "A savepoint (or retained checkpoint) folder a job resumes from (`flinkyarn run -s PATH`); empty: none.")
SAVEPOINT_IGNORE_UNCLAIMED_STATE = option(
    "execution.savepoint.ignore-unclaimed-state", BOOL, "false",
    "Resume even when the savepoint holds state no operator of the job claims (`--allow-non-restored-state`); that state is dropped.")
CHECKPOINTS_NUM_RETAINED = option(
    "state.checkpoints.num-retained", integer(1), "1",
    "How many of a job's newest completed checkpoints are kept; older ones are deleted.")

OUTPUT_MARK_SUCCESS = option(
    "execution.output.mark-successful-jobs", BOOL, "true",
    "Whether a finished job writes an empty _SUCCESS file into each of its output folders once they are complete, as Hadoop's mapreduce.fileoutputcommitter.marksuccessfuljobs (what schedulers' sensors wait for).")


JOB_OPTIONS = ("jobmanager.execution.failover-strategy, pipeline.max-parallelism, "
               "restart-strategy.*, execution.checkpointing.*, state.checkpoints.*, "
               "state.savepoints.*, execution.savepoint.* and execution.output.*")


def is_job_option(key: str) -> bool:
    """Whether a job may set `key` for itself (Flink's job-level fault-tolerance
    settings); everything else belongs to the cluster."""
    return key in (FAILOVER_STRATEGY.key, PIPELINE_MAX_PARALLELISM.key) or key.startswith(
        ("restart-strategy.", "execution.checkpointing.", "state.checkpoints.",
         "state.savepoints.", "execution.savepoint.", "execution.output."))


def is_client_option(key: str) -> bool:
    """Whether `key` is about the client itself (who it is on a secure cluster), which it
    uses with any target, a session too."""
    return key.startswith("security.kerberos.login.")


def resumes(graph: JobGraph, conf: Configuration | None = None,
            settings: Mapping[str, str] | None = None) -> bool:
    """Whether the job resumes from a savepoint (execution.savepoint.path, set by the job,
    by the client's job settings or by the cluster): its NO_OVERWRITE outputs then hold
    what the savepoint's job wrote, and are not refused for having content."""
    key = SAVEPOINT_PATH.key
    return bool(graph.configuration.get(key) or (settings or {}).get(key)
                or (conf is not None and conf.get(SAVEPOINT_PATH)))


def job_settings(raw: Mapping[str, str]) -> dict[str, str]:
    """The job-level entries of `raw` (e.g. a client's `-D` values for its jobs)."""
    return {key: value for key, value in raw.items() if is_job_option(key)}


def job_configuration(cluster: Configuration, settings: Mapping[str, str]) -> Configuration:
    """The cluster's configuration with a job's own settings on top. Raises
    ConfigurationError naming a key a job may not set, an unknown key or a bad value."""
    for key in settings:
        if not is_job_option(key):
            raise ConfigurationError(f"a job cannot set option {key!r}: it is the cluster's "
                                     f"(a job may set {JOB_OPTIONS})")
    return Configuration({**cluster.raw(), **settings}, source="the job's configuration")


@dataclass(frozen=True, slots=True)
class HeartbeatConfig:
    """Heartbeat timing in seconds. Invariant: 0 < interval < timeout. A target is also
    dead after `rpc_failure_threshold` consecutive calls that could not reach it (None:
    only the timeout counts)."""

    interval: float
    timeout: float
    rpc_failure_threshold: int | None = None

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ConfigurationError(f"option {HEARTBEAT_INTERVAL.key!r} must be greater than 0")
        if self.timeout <= self.interval:
            raise ConfigurationError(
                f"option {HEARTBEAT_TIMEOUT.key!r} ({self.timeout:g} s) must be greater than "
                f"{HEARTBEAT_INTERVAL.key!r} ({self.interval:g} s)"
            )
        if self.rpc_failure_threshold is not None and self.rpc_failure_threshold < 1:
            raise ConfigurationError(f"option {HEARTBEAT_RPC_FAILURE_THRESHOLD.key!r} must be "
                                     f"-1 (off) or at least 1, not {self.rpc_failure_threshold}")

    @classmethod
    def from_configuration(cls, conf: Configuration) -> HeartbeatConfig:
        threshold = conf.get(HEARTBEAT_RPC_FAILURE_THRESHOLD)
        return cls(interval=conf.get(HEARTBEAT_INTERVAL), timeout=conf.get(HEARTBEAT_TIMEOUT),
                   rpc_failure_threshold=None if threshold == -1 else threshold)


@dataclass(frozen=True, slots=True)
class RegistrationConfig:
    """How a TaskExecutor (or JobMaster) retries registering at the ResourceManager, in
    seconds: attempt timeouts start at `initial_backoff` and double up to `max_backoff`;
    after an error wait `error_delay`, after a refusal `refused_delay`; give up after
    `timeout`. Invariant: 0 < initial_backoff <= max_backoff."""

    initial_backoff: float
    max_backoff: float
    error_delay: float
    timeout: float
    refused_delay: float = REGISTRATION_REFUSED_DELAY.default_value

    def __post_init__(self) -> None:
        if self.initial_backoff <= 0:
            raise ConfigurationError(f"option {REGISTRATION_INITIAL_TIMEOUT.key!r} must be greater than 0")
        if self.max_backoff < self.initial_backoff:
            raise ConfigurationError(
                f"option {REGISTRATION_MAX_TIMEOUT.key!r} ({self.max_backoff:g} s) must not be less than "
                f"{REGISTRATION_INITIAL_TIMEOUT.key!r} ({self.initial_backoff:g} s)"
            )

    @classmethod
    def from_configuration(cls, conf: Configuration) -> RegistrationConfig:
        return cls(
            initial_backoff=conf.get(REGISTRATION_INITIAL_TIMEOUT),
            max_backoff=conf.get(REGISTRATION_MAX_TIMEOUT),
            error_delay=conf.get(REGISTRATION_ERROR_DELAY),
            timeout=conf.get(TASK_MANAGER_REGISTRATION_TIMEOUT),
            refused_delay=conf.get(REGISTRATION_REFUSED_DELAY),
        )


@dataclass(frozen=True, slots=True)
class RestartStrategyConfig:
    """The restart-strategy.* options, read once; the AppMaster makes each job a fresh
    strategy from it (yarn_am/jobmaster/restart_strategy.py). Durations in seconds.
    Invariants (checked, naming the option): initial_backoff <= max_backoff,
    backoff_multiplier >= 1."""

    type: str = "none"
    fixed_delay_attempts: int = 1
    fixed_delay_delay: float = 1.0
    initial_backoff: float = 1.0
    max_backoff: float = 300.0
    backoff_multiplier: float = 2.0
    reset_backoff_threshold: float = 3600.0
    max_failures_per_interval: int = 1
    failure_rate_interval: float = 60.0
    failure_rate_delay: float = 1.0

    @property
    def attempt_limit(self) -> int | None:
        """How many restarts a job may have in all, where the strategy says (fixed-delay)."""
        return self.fixed_delay_attempts if self.type == "fixed-delay" else None

    def __post_init__(self) -> None:
        if self.type not in ("none", "fixed-delay", "exponential-delay", "failure-rate"):
            raise ConfigurationError(f"option {RESTART_STRATEGY.key!r}: unknown "
                                     f"restart strategy {self.type!r}")
        if self.initial_backoff <= 0:
            raise ConfigurationError(
                f"option {EXPONENTIAL_DELAY_INITIAL_BACKOFF.key!r} must be greater than 0")
        if self.max_backoff < self.initial_backoff:
            raise ConfigurationError(
                f"option {EXPONENTIAL_DELAY_MAX_BACKOFF.key!r} ({self.max_backoff:g} s) "
                f"must not be less than {EXPONENTIAL_DELAY_INITIAL_BACKOFF.key!r} "
                f"({self.initial_backoff:g} s)")
        if self.backoff_multiplier < 1:
            raise ConfigurationError(
                f"option {EXPONENTIAL_DELAY_BACKOFF_MULTIPLIER.key!r} "
                f"({self.backoff_multiplier:g}) must be at least 1")
        if self.reset_backoff_threshold <= 0:
            raise ConfigurationError(
                f"option {EXPONENTIAL_DELAY_RESET_BACKOFF_THRESHOLD.key!r} must be "
                "greater than 0")
        if self.failure_rate_interval <= 0:
            raise ConfigurationError(
                f"option {FAILURE_RATE_INTERVAL.key!r} must be greater than 0")

    @classmethod
    def from_configuration(cls, conf: Configuration) -> RestartStrategyConfig:
        return cls(
            type=conf.get(RESTART_STRATEGY),
            fixed_delay_attempts=conf.get(FIXED_DELAY_ATTEMPTS),
            fixed_delay_delay=conf.get(FIXED_DELAY_DELAY),
            initial_backoff=conf.get(EXPONENTIAL_DELAY_INITIAL_BACKOFF),
            max_backoff=conf.get(EXPONENTIAL_DELAY_MAX_BACKOFF),
            backoff_multiplier=conf.get(EXPONENTIAL_DELAY_BACKOFF_MULTIPLIER),
            reset_backoff_threshold=conf.get(EXPONENTIAL_DELAY_RESET_BACKOFF_THRESHOLD),
            max_failures_per_interval=conf.get(FAILURE_RATE_MAX_FAILURES_PER_INTERVAL),
            failure_rate_interval=conf.get(FAILURE_RATE_INTERVAL),
            failure_rate_delay=conf.get(FAILURE_RATE_DELAY),
        )


@dataclass(frozen=True, slots=True)
class CheckpointConfig:
    """The execution.checkpointing.* and state.checkpoints.* options of a job, in
    seconds; `interval` 0: no checkpoints; `directory` empty: the cluster's default."""

    interval: float = 0.0
    timeout: float = 600.0
    min_pause: float = 0.0
    max_concurrent: int = 1
    tolerable_failures: int = 0
    directory: str = ""
    num_retained: int = 1
    retention: str = "NO_EXTERNALIZED_CHECKPOINTS"
    savepoint_directory: str = ""
    restore_path: str = ""               # execution.savepoint.path
    allow_non_restored_state: bool = False

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    @classmethod
    def from_configuration(cls, conf: Configuration) -> CheckpointConfig:
        return cls(
            interval=conf.get(CHECKPOINTING_INTERVAL),
            timeout=conf.get(CHECKPOINTING_TIMEOUT),
            min_pause=conf.get(CHECKPOINTING_MIN_PAUSE),
            max_concurrent=conf.get(CHECKPOINTING_MAX_CONCURRENT),
            tolerable_failures=conf.get(CHECKPOINTING_TOLERABLE_FAILURES),
            directory=conf.get(CHECKPOINTS_DIRECTORY),
            num_retained=conf.get(CHECKPOINTS_NUM_RETAINED),
            retention=conf.get(CHECKPOINTS_RETENTION),
            savepoint_directory=conf.get(SAVEPOINTS_DIRECTORY),
            restore_path=conf.get(SAVEPOINT_PATH),
            allow_non_restored_state=conf.get(SAVEPOINT_IGNORE_UNCLAIMED_STATE),
        )


def check_cluster_options(conf: Configuration) -> None:
    """Every rule that spans options of a cluster's configuration, checked as the
    AppMaster and TaskExecutors will check them when they start; the client calls this
    before it starts anything. Raises ConfigurationError naming the keys."""
    HeartbeatConfig.from_configuration(conf)
    RegistrationConfig.from_configuration(conf)
    RestartStrategyConfig.from_configuration(conf)
    max_parallelism(conf)


def max_parallelism(conf: Configuration) -> int:
    """pipeline.max-parallelism as a bound on parallelism (-1: the upper bound; a job's
    key groups: flinkyarn.key_groups.resolve_max_parallelism); ConfigurationError for 0."""
    most = conf.get(PIPELINE_MAX_PARALLELISM)
    if most == 0:
        raise ConfigurationError(f"option {PIPELINE_MAX_PARALLELISM.key!r} must be -1 or at "
                                 f"least 1, not 0")
    return MAX_PARALLELISM_UPPER_BOUND if most == -1 else most


def with_spark_started(conf: Configuration, graph: JobGraph) -> Configuration:
    """For a cluster started for `graph`: its TaskExecutors start their SparkSession as
    they start when the job has a Spark stage, unless the configuration says otherwise."""
    key = TASK_MANAGER_SPARK_START_EAGERLY.key
    if graph.uses_spark and key not in conf.raw():
        return conf.with_overrides({key: "true"})
    return conf


def check_job_graph(graph: JobGraph, cluster: Configuration) -> None:
    """The checks a job graph gets at submit, by the client before it starts anything and
    by the Dispatcher: well-formed, each vertex's parallelism within the job's
    pipeline.max-parallelism. Raises InvalidJobGraph (ConfigurationError for a bad job
    setting) naming what is wrong."""
    most = max_parallelism(job_configuration(cluster, graph.configuration))
    graph.validate()
    for vertex in graph.vertices:
        if vertex.parallelism > most:
            raise InvalidJobGraph(f"vertex {vertex.name!r}: parallelism {vertex.parallelism} is "
                                  f"above the maximum parallelism {most} "
                                  f"({PIPELINE_MAX_PARALLELISM.key})")
