"""Restart strategies as a specification: a failure history in, restart or not and the
pause out. Time is a plain `now` that each test advances, like a manual clock."""

from __future__ import annotations

import pytest

from flinkyarn.configuration import Configuration, ConfigurationError
from flinkyarn.options import RestartStrategyConfig
from yarn_am.jobmaster.restart_strategy import (ExponentialDelayRestartBackoffTimeStrategy,
                                                FailureRateRestartBackoffTimeStrategy,
                                                FixedDelayRestartBackoffTimeStrategy,
                                                NoRestartBackoffTimeStrategy, create,
                                                from_configuration)


def decisions(strategy, failure_times) -> list[tuple[bool, float]]:
    """(can restart, backoff) after each failure, failures at the given times."""
    out = []
    for now in failure_times:
        strategy.notify_failure(now)
        out.append((strategy.can_restart(), strategy.backoff_time()))
    return out


def test_no_restart_never_restarts():
    assert decisions(NoRestartBackoffTimeStrategy(), [0.0])[0][0] is False


def test_fixed_delay_restarts_attempts_times_then_fails():
    strategy = FixedDelayRestartBackoffTimeStrategy(attempts=2, delay=3.0)

    assert decisions(strategy, [0.0, 10.0, 10_000.0]) == [(True, 3.0), (True, 3.0), (False, 3.0)]


def test_fixed_delay_with_zero_attempts_fails_at_the_first_failure():
    assert decisions(FixedDelayRestartBackoffTimeStrategy(0, 1.0), [5.0]) == [(False, 1.0)]


def test_exponential_delay_grows_by_the_multiplier_up_to_the_maximum():
    strategy = ExponentialDelayRestartBackoffTimeStrategy(
        initial_backoff=1.0, max_backoff=10.0, multiplier=3.0, reset_threshold=100.0)

    backoffs = [b for _, b in decisions(strategy, [0.0, 2.0, 6.0, 16.0, 30.0, 45.0])]

    assert backoffs == [1.0, 3.0, 9.0, 10.0, 10.0, 10.0]
    assert strategy.can_restart()


def test_exponential_delay_goes_back_to_initial_after_a_quiet_threshold_past_the_pause():
    strategy = ExponentialDelayRestartBackoffTimeStrategy(1.0, 60.0, 2.0, reset_threshold=50.0)
    decisions(strategy, [0.0, 1.0, 3.0])  # 1, 2, 4
    assert strategy.backoff_time() == 4.0

    # 3 + 50 + 4 = 57: one second short of the threshold (measured from the pause's end)
    strategy.notify_failure(56.0)
    assert strategy.backoff_time() == 8.0
    strategy.notify_failure(56.0 + 50.0 + 8.0)
    assert strategy.backoff_time() == 1.0


def test_failure_rate_allows_max_failures_in_any_interval():
    strategy = FailureRateRestartBackoffTimeStrategy(max_failures_per_interval=2,
                                                     interval=60.0, delay=5.0)

    assert decisions(strategy, [0.0, 30.0]) == [(True, 5.0), (True, 5.0)]
    # a third failure within 60 s of the first: too many
    strategy_late = FailureRateRestartBackoffTimeStrategy(2, 60.0, 5.0)
    assert decisions(strategy_late, [0.0, 30.0, 60.0])[-1] == (False, 5.0)


def test_failure_rate_forgets_failures_older_than_the_interval():
    strategy = FailureRateRestartBackoffTimeStrategy(2, interval=60.0, delay=1.0)

    allowed = [ok for ok, _ in decisions(strategy, [0.0, 30.0, 61.0, 91.5, 125.0])]

    # 61 - 0 > 60, 91.5 - 30 > 60, 125 - 61 > 60: never three in one window
    assert allowed == [True] * 5
    strategy.notify_failure(126.0)  # 91.5, 125, 126 within 60 s
    assert not strategy.can_restart()


def test_failure_rate_default_of_one_allows_one_restart_per_interval():
    strategy = FailureRateRestartBackoffTimeStrategy(1, 60.0, 1.0)

    assert [ok for ok, _ in decisions(strategy, [0.0, 61.0, 100.0])] == [True, True, False]


@pytest.mark.parametrize("raw, expected", [
    ({}, NoRestartBackoffTimeStrategy),
    ({"restart-strategy.type": "fixed-delay"}, FixedDelayRestartBackoffTimeStrategy),
    ({"restart-strategy.type": "exponential-delay"}, ExponentialDelayRestartBackoffTimeStrategy),
    ({"restart-strategy.type": "failure-rate"}, FailureRateRestartBackoffTimeStrategy),
])
def test_from_configuration_builds_the_configured_strategy(raw, expected):
    assert type(from_configuration(Configuration.from_raw(raw))) is expected


def test_defaults_are_flinks():
    assert RestartStrategyConfig.from_configuration(Configuration()) == RestartStrategyConfig(
        type="none", fixed_delay_attempts=1, fixed_delay_delay=1.0, initial_backoff=1.0,
        max_backoff=300.0, backoff_multiplier=2.0, reset_backoff_threshold=3600.0,
        max_failures_per_interval=1, failure_rate_interval=60.0, failure_rate_delay=1.0)


def test_configured_values_reach_the_strategy():
    conf = Configuration.from_raw({"restart-strategy.type": "fixed-delay",
                                   "restart-strategy.fixed-delay.attempts": "3",
                                   "restart-strategy.fixed-delay.delay": "10 s"})
    strategy = from_configuration(conf)

    assert decisions(strategy, [0, 1, 2, 3]) == [(True, 10.0)] * 3 + [(False, 10.0)]


def test_each_job_gets_a_strategy_without_history():
    config = RestartStrategyConfig(type="fixed-delay", fixed_delay_attempts=1)
    first = create(config)
    first.notify_failure(0.0)
    first.notify_failure(1.0)

    assert not first.can_restart()
    second = create(config)
    second.notify_failure(2.0)
    assert second.can_restart()


@pytest.mark.parametrize("raw, key", [
    ({"restart-strategy.exponential-delay.initial-backoff": "10 min"},
     "restart-strategy.exponential-delay.max-backoff"),
    ({"restart-strategy.exponential-delay.backoff-multiplier": "0.5"},
     "restart-strategy.exponential-delay.backoff-multiplier"),
    ({"restart-strategy.exponential-delay.initial-backoff": "0 s"},
     "restart-strategy.exponential-delay.initial-backoff"),
    ({"restart-strategy.failure-rate.failure-rate-interval": "0 s"},
     "restart-strategy.failure-rate.failure-rate-interval"),
])
def test_a_bad_combination_names_the_option(raw, key):
    with pytest.raises(ConfigurationError, match=repr(key)):
        RestartStrategyConfig.from_configuration(Configuration.from_raw(raw))


def test_a_bad_value_is_refused_by_the_registry_naming_the_option():
    with pytest.raises(ConfigurationError, match="'restart-strategy.fixed-delay.attempts'"):
        Configuration.from_raw({"restart-strategy.fixed-delay.attempts": "-1"})
