"""The configuration registry: value syntax, loading, overrides, and the default file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flinkyarn import options
from flinkyarn.configuration import (
    STRING,
    ConfigOption,
    Configuration,
    ConfigurationError,
    config_file,
    format_duration,
    format_memory,
    option,
    parse_duration,
    parse_dynamic_properties,
    parse_memory_size,
    registered_options,
    user_config_file,
)
from flinkyarn.ids import JobID, JobVertexID
from flinkyarn.jobgraph import InvalidJobGraph, JobGraph, JobVertex
from flinkyarn.options import HeartbeatConfig, RegistrationConfig
from flinkyarn.retry import Backoff
from taskexecutor.environment import NetworkConfig

REPO = Path(__file__).resolve().parents[2]
DEFAULT_FILE = REPO / "conf" / "flinkyarn.yaml"


def write_conf(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "flinkyarn.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ------------------------------------------------------------------ value syntax


@pytest.mark.parametrize("text, seconds", [
    ("10 s", 10), ("5s", 5), ("30 sec", 30), ("2 secs", 2), ("1 second", 1), ("3 seconds", 3),
    ("500 ms", 0.5), ("100ms", 0.1), ("1 milli", 0.001), ("250 millis", 0.25),
    ("1 millisecond", 0.001), ("20 milliseconds", 0.02),
    ("1 min", 60), ("2 mins", 120), ("1 minute", 60), ("3 minutes", 180), ("4m", 240),
    ("2 h", 7200), ("1 hour", 3600), ("3 hours", 10800),
    ("1 d", 86400), ("1 day", 86400), ("2 days", 172800),
    ("100", 0.1),  # a plain number is milliseconds, as in Flink
    ("0", 0), ("10 S", 10), (" 10 s ", 10), ("1.5 s", 1.5),
])
def test_duration_forms(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["-1 s", "ten seconds", "10 parsecs", "", "s", "1 s 2", "1e3 s", "10 ms s"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("text, size", [
    ("1g", 1 << 30), ("1 gb", 1 << 30), ("1 GB", 1 << 30), ("512m", 512 << 20), ("512 mb", 512 << 20),
    ("64 kb", 64 << 10), ("64k", 64 << 10), ("1024b", 1024), ("1024 bytes", 1024),
    ("2 tb", 2 << 40), ("1024", 1024),
])
def test_memory_size_forms(text, size):
    assert parse_memory_size(text) == size


@pytest.mark.parametrize("text", ["-1 mb", "1 zb", "lots", "", "mb"])
def test_bad_memory_sizes_are_refused(text):
    with pytest.raises(ValueError):
        parse_memory_size(text)


@pytest.mark.parametrize("seconds, text", [
    (0.1, "100 ms"), (10, "10 s"), (60, "1 min"), (90, "90 s"), (7200, "2 h"), (86400, "1 d"), (0, "0 ms"),
])
def test_durations_print_in_the_largest_exact_unit_and_read_back(seconds, text):
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("size, text", [
    (1 << 30, "1 gb"), (1536 << 20, "1536 mb"), (64 << 10, "64 kb"), (100, "100 b"), (3 << 40, "3 tb"),
])
def test_memory_sizes_print_in_the_largest_exact_unit_and_read_back(size, text):
    assert format_memory(size) == text
    assert parse_memory_size(text) == size


# ------------------------------------------------------------------- typed values


def test_unset_options_have_their_defaults():
    conf = Configuration()
    assert conf.get(options.HEARTBEAT_INTERVAL) == 10.0
    assert conf.get(options.TASK_MANAGER_PROCESS_MEMORY) == 1 << 30
    assert conf.get(options.NUM_TASK_SLOTS) == 2
    assert conf.get(options.EXECUTION_ATTACHED) is True
    assert conf.get(options.EXECUTION_TARGET) == "auto"
    assert conf.raw() == {}


def test_set_values_are_typed():
    conf = Configuration.from_raw({
        "heartbeat.interval": "2 s", "taskmanager.numberOfTaskSlots": "4",
        "execution.attached": "FALSE", "execution.target": "Yarn-Per-Job",
        "taskmanager.cpu.cores": "0.5", "rpc.max-message-size": "1 mb",
    })
    assert conf.get(options.HEARTBEAT_INTERVAL) == 2.0
    assert conf.get(options.NUM_TASK_SLOTS) == 4
    assert conf.get(options.EXECUTION_ATTACHED) is False
    assert conf.get(options.EXECUTION_TARGET) == "yarn-per-job"
    assert conf.get(options.TASK_MANAGER_CPU_CORES) == 0.5
    assert conf.get(options.RPC_MAX_MESSAGE_SIZE) == 1 << 20


@pytest.mark.parametrize("key, value, expected", [
    ("heartbeat.interval", "soon", "duration"),
    ("heartbeat.interval", "-5 s", "duration"),
    ("taskmanager.memory.process.size", "big", "memory size"),
    ("taskmanager.numberOfTaskSlots", "two", "whole number"),
    ("taskmanager.numberOfTaskSlots", "0", "at least 1"),
    ("taskmanager.cpu.cores", "0", "greater than 0"),
    ("rest.port", "70000", "from 0 to 65535"),
    ("execution.attached", "yes", "true or false"),
    ("execution.target", "kubernetes", "one of auto, local, yarn-per-job, yarn-session"),
])
def test_a_bad_value_fails_naming_key_value_and_expected_form(key, value, expected):
    with pytest.raises(ConfigurationError) as failure:
        Configuration.from_raw({key: value})
    message = str(failure.value)
    assert repr(key) in message and repr(value) in message and expected in message


def test_a_bad_value_in_the_file_names_the_file_and_key(tmp_path):
    path = write_conf(tmp_path, "heartbeat.timeout: 50 parsecs\n")
    with pytest.raises(ConfigurationError, match=r"'heartbeat.timeout' in .*flinkyarn.yaml"):
        Configuration.load(path)


def test_getting_an_unregistered_option_fails():
    stray = ConfigOption("not.registered", STRING, "", "")
    with pytest.raises(ConfigurationError, match="'not.registered'"):
        Configuration().get(stray)


def test_a_key_cannot_be_registered_twice():
    with pytest.raises(ConfigurationError, match="'heartbeat.interval' is registered twice"):
        option("heartbeat.interval", STRING, "", "again")


# ------------------------------------------------------------ unknown keys, files


def test_an_unknown_key_in_the_file_is_named_with_a_suggestion(tmp_path):
    path = write_conf(tmp_path, "heartbeat.intervall: 10 s\n")
    with pytest.raises(ConfigurationError, match=r"unknown option 'heartbeat.intervall'.*"
                                                 r"did you mean 'heartbeat.interval'"):
        Configuration.load(path)


def test_an_unknown_key_in_overrides_is_named_with_a_suggestion(tmp_path):
    path = write_conf(tmp_path, "")
    with pytest.raises(ConfigurationError,
                       match=r"unknown option 'taskmanager.numberOfTaskSlot'.*"
                             r"did you mean 'taskmanager.numberOfTaskSlots'"):
        Configuration.load(path, overrides={"taskmanager.numberOfTaskSlot": "4"})


def test_an_unknown_key_unlike_any_option_is_still_named():
    with pytest.raises(ConfigurationError, match="unknown option 'zzz'"):
        Configuration.from_raw({"zzz": "1"})


@pytest.mark.parametrize("text, complaint", [
    ("- heartbeat.interval\n", "must be a mapping"),
    ("heartbeat:\n  interval: 10 s\n", "'heartbeat'.*must be a single value"),
    ("yarn.tags: [a, b]\n", "'yarn.tags'.*must be a single value"),
    ("heartbeat.interval: 1 s\nheartbeat.interval: 2 s\n", "line 2: 'heartbeat.interval' is set twice"),
    ("heartbeat.interval: [\n", "not valid YAML"),
])
def test_a_file_that_is_not_a_flat_mapping_is_refused_naming_the_file(tmp_path, text, complaint):
    path = write_conf(tmp_path, text)
    with pytest.raises(ConfigurationError, match=f"{path}.*{complaint}"):
        Configuration.load(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot read configuration file .*nowhere.yaml"):
        Configuration.load(tmp_path / "nowhere.yaml")


def test_an_empty_file_means_all_defaults(tmp_path):
    assert Configuration.load(write_conf(tmp_path, "# nothing set\n")) == Configuration()


def test_file_values_are_read_as_written(tmp_path):
    # YAML 1.1 would turn `yes` into a boolean and 0755 into 493; the registry must see the text.
    path = write_conf(tmp_path, "yarn.application.name: yes\nyarn.tags: 0755\nexecution.attached: True\n")
    conf = Configuration.load(path)
    assert conf.get(options.YARN_APPLICATION_NAME) == "yes"
    assert conf.get(options.YARN_TAGS) == "0755"
    assert conf.get(options.EXECUTION_ATTACHED) is True


# ---------------------------------------------------------------- -D and overrides


def test_dynamic_properties():
    assert parse_dynamic_properties(["heartbeat.interval=5 s", "yarn.tags=a=b", " yarn.tags =c", "rest.address="]) == {
        "heartbeat.interval": "5 s", "yarn.tags": "c", "rest.address": "",
    }


@pytest.mark.parametrize("item", ["heartbeat.interval", "=5 s", " =x"])
def test_a_bad_dynamic_property_is_named(item):
    with pytest.raises(ConfigurationError, match=f"bad dynamic property {item!r}"):
        parse_dynamic_properties([item])


def test_overrides_win_over_the_file(tmp_path):
    path = write_conf(tmp_path, "heartbeat.interval: 1 s\nheartbeat.timeout: 9 s\n")
    conf = Configuration.load(path, overrides=parse_dynamic_properties(["heartbeat.interval=3 s"]))
    assert conf.get(options.HEARTBEAT_INTERVAL) == 3.0
    assert conf.get(options.HEARTBEAT_TIMEOUT) == 9.0


def test_with_overrides_leaves_the_original_alone():
    base = Configuration.from_raw({"rest.port": "8081"})
    changed = base.with_overrides({"rest.port": "9000", "yarn.tags": "x"})
    assert base.get(options.REST_PORT) == 8081
    assert changed.get(options.REST_PORT) == 9000
    assert changed.raw() == {"rest.port": "9000", "yarn.tags": "x"}


def test_a_bad_override_fails_naming_the_key():
    with pytest.raises(ConfigurationError, match="'rest.port'"):
        Configuration().with_overrides({"rest.port": "http"})


def test_raw_round_trips_to_another_process(tmp_path):
    path = write_conf(tmp_path, "taskmanager.numberOfTaskSlots: 3\n")
    conf = Configuration.load(path, overrides={"slot.idle.timeout": "2 min"})
    raw = conf.raw()
    assert raw == {"taskmanager.numberOfTaskSlots": "3", "slot.idle.timeout": "2 min"}
    rebuilt = Configuration.from_raw(raw)
    assert rebuilt == conf
    assert rebuilt.get(options.SLOT_IDLE_TIMEOUT) == 120.0
    assert rebuilt.get(options.NUM_TASK_SLOTS) == 3


def test_raw_returns_a_copy():
    conf = Configuration.from_raw({"rest.port": "1"})
    conf.raw()["rest.port"] = "2"
    assert conf.get(options.REST_PORT) == 1


# ------------------------------------------------------------------- default file


def test_default_file_lists_exactly_the_registered_options_with_their_defaults():
    written = yaml.load(DEFAULT_FILE.read_text(), Loader=yaml.BaseLoader)
    registered = registered_options()
    assert sorted(set(registered) - set(written)) == [], "options missing from conf/flinkyarn.yaml"
    assert sorted(set(written) - set(registered)) == [], "conf/flinkyarn.yaml has unregistered keys"
    wrong = {key: written[key] for key, opt in registered.items()
             if opt.parse(written[key]) != opt.default_value}
    assert wrong == {}, "conf/flinkyarn.yaml values differ from the registry defaults"


def test_default_file_describes_each_option_on_the_line_above():
    lines = DEFAULT_FILE.read_text().splitlines()
    above = {line.partition(":")[0]: lines[i - 1] for i, line in enumerate(lines)
             if line and not line.startswith("#")}
    for key, opt in registered_options().items():
        assert above[key] == f"# {opt.description}", key


# ------------------------------------------------------------- which file is read


@pytest.fixture
def places(tmp_path, monkeypatch):
    """A user with a home of their own and neither variable set: the places a file may be."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("FLINKYARN_CONF_DIR", raising=False)
    monkeypatch.delenv("FLINKYARN_HOME", raising=False)
    return home


def test_the_conf_dir_variable_comes_first_then_the_users_file_then_the_defaults(
        places, tmp_path, monkeypatch):
    user_file = write_conf(places / ".flinkyarn", "heartbeat.interval: 3 s\n")
    conf_dir = tmp_path / "conf"
    write_conf(conf_dir, "heartbeat.interval: 4 s\n")

    monkeypatch.setenv("FLINKYARN_CONF_DIR", str(conf_dir))
    assert config_file() == conf_dir / "flinkyarn.yaml"
    assert Configuration.load().get(options.HEARTBEAT_INTERVAL) == 4.0

    monkeypatch.delenv("FLINKYARN_CONF_DIR")
    assert config_file() == user_file
    assert Configuration.load().get(options.HEARTBEAT_INTERVAL) == 3.0

    user_file.unlink()
    assert config_file() is None
    assert Configuration.load().get(options.HEARTBEAT_INTERVAL) == 10.0


def test_a_conf_dir_without_the_file_is_an_error_not_a_fallback(places, tmp_path, monkeypatch):
    write_conf(places / ".flinkyarn", "heartbeat.interval: 3 s\n")
    monkeypatch.setenv("FLINKYARN_CONF_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigurationError, match=r"cannot read configuration file .*nowhere"):
        Configuration.load()


def test_the_users_file_is_in_flinkyarns_folder_of_the_user(places, tmp_path, monkeypatch):
    """The folder of the user's applications, tickets and truststores (FLINKYARN_HOME,
    else ~/.flinkyarn)."""
    from flinkyarn import kerberos

    assert user_config_file() == places / ".flinkyarn" / "flinkyarn.yaml"
    assert user_config_file().parent == kerberos.client_home()
    monkeypatch.setenv("FLINKYARN_HOME", str(tmp_path / "elsewhere"))
    assert user_config_file() == tmp_path / "elsewhere" / "flinkyarn.yaml"
    assert user_config_file().parent == kerberos.client_home()


def test_without_a_file_every_option_has_its_default_and_none_counts_as_set(places):
    """What the repository's conf/flinkyarn.yaml lists, without marking every option as
    set by the user (options.with_spark_started looks at what was set)."""
    assert config_file() is None
    loaded = Configuration.load()
    assert loaded.raw() == {}
    listed = Configuration.load(DEFAULT_FILE)
    assert {key: loaded.get(opt) for key, opt in registered_options().items()} == \
        {key: listed.get(opt) for key, opt in registered_options().items()}


# ------------------------------------------------------- component configurations


def test_heartbeat_config_from_defaults():
    assert HeartbeatConfig.from_configuration(Configuration()) == HeartbeatConfig(
        interval=10.0, timeout=50.0, rpc_failure_threshold=2)


def test_heartbeat_rpc_failure_threshold_minus_one_turns_it_off_and_zero_is_refused():
    off = Configuration({"heartbeat.rpc-failure-threshold": "-1"})
    assert HeartbeatConfig.from_configuration(off).rpc_failure_threshold is None
    with pytest.raises(ConfigurationError, match="'heartbeat.rpc-failure-threshold' must be -1"):
        HeartbeatConfig.from_configuration(Configuration({"heartbeat.rpc-failure-threshold": "0"}))


@pytest.mark.parametrize("timeout", ["10 s", "5 s"])
def test_heartbeat_config_rejects_a_timeout_not_above_the_interval(timeout):
    conf = Configuration.from_raw({"heartbeat.interval": "10 s", "heartbeat.timeout": timeout})
    with pytest.raises(ConfigurationError, match="'heartbeat.timeout'"):
        HeartbeatConfig.from_configuration(conf)


def test_heartbeat_config_rejects_a_zero_interval():
    with pytest.raises(ConfigurationError, match="'heartbeat.interval'"):
        HeartbeatConfig.from_configuration(Configuration.from_raw({"heartbeat.interval": "0 s"}))


def test_registration_config_from_configuration():
    conf = Configuration.from_raw({"cluster.registration.error-delay": "1 s"})
    assert RegistrationConfig.from_configuration(conf) == RegistrationConfig(
        initial_backoff=0.1, max_backoff=30.0, error_delay=1.0, timeout=300.0, refused_delay=30.0)


def test_registration_config_rejects_a_max_backoff_below_the_initial_one():
    conf = Configuration.from_raw({"cluster.registration.initial-timeout": "1 min",
                                   "cluster.registration.max-timeout": "30 s"})
    with pytest.raises(ConfigurationError, match="'cluster.registration.max-timeout'"):
        RegistrationConfig.from_configuration(conf)


def test_the_partition_request_backoff_comes_from_flinks_request_backoff_options():
    conf = Configuration.from_raw({"taskmanager.network.request-backoff.initial": "50 ms",
                                   "taskmanager.network.request-backoff.max": "2 s"})
    assert NetworkConfig.from_configuration(conf).request_backoff == Backoff(0.05, 2.0)
    conf = Configuration.from_raw({"taskmanager.network.request-backoff.initial": "5 s"})
    with pytest.raises(ConfigurationError, match="'taskmanager.network.request-backoff.max'"):
        NetworkConfig.from_configuration(conf)


def test_a_vertex_above_the_max_parallelism_is_refused_naming_the_option():
    def job(parallelism: int, **settings: str) -> JobGraph:
        return JobGraph(JobID("job"), "wide", [JobVertex(JobVertexID("a"), "src", parallelism, b"")],
                        configuration=settings)

    with pytest.raises(InvalidJobGraph, match=r"'src': parallelism 40000 is above the maximum "
                                              r"parallelism 32768 \(pipeline.max-parallelism\)"):
        options.check_job_graph(job(40000), Configuration())
    options.check_job_graph(job(32768), Configuration())
    with pytest.raises(InvalidJobGraph, match="maximum parallelism 8 "):
        options.check_job_graph(job(10, **{"pipeline.max-parallelism": "8"}), Configuration())
    with pytest.raises(InvalidJobGraph, match="maximum parallelism 4 "):
        options.check_job_graph(job(10), Configuration.from_raw({"pipeline.max-parallelism": "4"}))
    with pytest.raises(ConfigurationError, match="'pipeline.max-parallelism' must be -1 or at least 1"):
        options.check_job_graph(job(1, **{"pipeline.max-parallelism": "0"}), Configuration())


def test_a_deprecated_key_is_read_as_its_option_now_with_a_warning(caplog):
    conf = Configuration({"resourcemanager.local.max-taskmanagers": "3"}, source="a file")

    assert conf.get(options.MAX_TASK_MANAGERS) == 3
    assert conf.raw() == {"resourcemanager.max-taskmanagers": "3"}  # other processes: the new key
    assert "'resourcemanager.local.max-taskmanagers' in a file is deprecated: use " \
           "'resourcemanager.max-taskmanagers'" in caplog.text


def test_the_current_key_wins_over_a_deprecated_one():
    conf = Configuration({"resourcemanager.local.max-taskmanagers": "3",
                          "resourcemanager.max-taskmanagers": "5"})
    assert conf.get(options.MAX_TASK_MANAGERS) == 5
