"""The embedded usage source (kai_py/state/usage.py) and KAI's usageDBConfig keys.

Cases after KAI's usage tests: ``usage_params_test.go`` (defaults, a half-life
of 0 or below turns decay off, window types), the fake usage client with history
(``fake_with_history.go``: usage summed over the window, decayed by the
half-life, divided by the capacity summed the same way) and the tumbling
window's reset times (``prometheus_test.go``,
``TestGetLatestUsageResetTime_TumblingWindow``).
"""

from __future__ import annotations

import pytest

from kai_py.scheduler.resources import Res
from kai_py.scheduler.timeshare.settings import UsageDB, parse_usage_db
from kai_py.state.usage import UsageHistory

HOUR = 3600.0


def gpus(n: float) -> Res:
    return Res(gpu=n)


# ------------------------------------------------ usage_params_test.go
def test_empty_params_take_kais_defaults() -> None:
    got = parse_usage_db({}, "usageDBConfig")
    assert (got.client_type, got.window, got.window_type, got.half_life) == (
        "embedded",
        7 * 24 * HOUR,
        "sliding",
        None,
    )
    assert (got.fetch_interval, got.staleness, got.wait_timeout) == (60.0, 300.0, 60.0)


@pytest.mark.parametrize("value", ["0s", "-1h", "0"])
def test_a_half_life_of_zero_or_below_turns_decay_off(value: str) -> None:
    got = parse_usage_db({"usageParams": {"halfLifePeriod": value}}, "x")
    assert got.half_life is None


def test_params_given_are_kept() -> None:
    got = parse_usage_db(
        {
            "clientType": "prometheus",
            "connectionString": "http://prom:9090",
            "usageParams": {
                "halfLifePeriod": "30m",
                "windowSize": "2d",
                "windowType": "tumbling",
                "tumblingWindowStartTime": "2026-01-01T00:00:00Z",
                "extraParams": {"queryResolution": "30s"},
            },
        },
        "x",
    )
    assert got.client_type == "prometheus" and got.connection_string == "http://prom:9090"
    assert (got.half_life, got.window, got.window_type) == (1800.0, 2 * 24 * HOUR, "tumbling")
    assert got.tumbling_start == 1767225600.0
    assert got.extra == {"queryResolution": "30s"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"usageParams": {"windowType": "Sliding"}}, "x.usageParams.windowType: expected"),
        ({"usageParams": {"windowType": "cron"}}, "'cron'"),
        ({"usageParams": {"windowSize": "a week"}}, "x.usageParams.windowSize: invalid"),
        ({"clientType": "influx"}, "x.clientType: expected one of embedded, prometheus"),
        ({"usageParams": {"windowsize": "1h"}}, "unknown key(s) windowsize"),
    ],
)
def test_a_bad_value_is_named_with_its_field(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_usage_db(data, "x")
    assert message in str(info.value)


# ------------------------------------------------ fake_with_history.go
def test_usage_is_normalised_to_the_capacity_over_the_window() -> None:
    h = UsageHistory(UsageDB(window=10 * HOUR))
    # 10 GPUs for 10 hours; a queue holds 8 for 3 hours: 24 of 100 GPU-hours.
    h.record(0.0, {"a": gpus(8)}, gpus(10))
    h.record(3 * HOUR, {"a": gpus(0)}, gpus(10))
    assert h.usage(10 * HOUR)["a"].gpu == pytest.approx(0.24)


def test_usage_older_than_a_sliding_window_is_forgotten() -> None:
    h = UsageHistory(UsageDB(window=HOUR))
    h.record(0.0, {"a": gpus(4), "b": gpus(0)}, gpus(4))
    h.record(HOUR, {"a": gpus(0), "b": gpus(4)}, gpus(4))
    assert h.usage(HOUR)["a"].gpu == pytest.approx(1.0)
    got = h.usage(2 * HOUR)
    assert got.get("a", Res()).gpu == pytest.approx(0.0, abs=0.05)
    assert got["b"].gpu == pytest.approx(1.0, abs=0.05)


def test_half_life_weighs_recent_usage_more() -> None:
    h = UsageHistory(UsageDB(window=4 * HOUR, half_life=HOUR))
    h.record(0.0, {"old": gpus(2), "new": gpus(0)}, gpus(2))
    h.record(HOUR, {"old": gpus(0), "new": gpus(0)}, gpus(2))
    h.record(2 * HOUR, {"old": gpus(0), "new": gpus(2)}, gpus(2))
    got = h.usage(3 * HOUR)
    # The same GPU-hours, two hours apart: the older counts a quarter as much.
    assert got["old"].gpu / got["new"].gpu == pytest.approx(0.25, rel=0.05)
    no_decay = UsageHistory(UsageDB(window=4 * HOUR))
    no_decay.buckets, no_decay.last = h.buckets, h.last
    same = no_decay.usage(3 * HOUR)
    assert same["old"].gpu == pytest.approx(same["new"].gpu)


# ------------------------------------------------ prometheus_test.go (tumbling resets)
START = 1767225600.0  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize(
    ("window", "now", "reset"),
    [
        (HOUR, START + 1800, START),  # 1 hour window - middle of window
        (HOUR, START + HOUR, START + HOUR),  # exact window boundary
        (HOUR, START + HOUR + 1, START + HOUR),  # one second after boundary
        (900.0, START + 1000, START + 900),  # 15 minute window - between boundaries
        (7 * 24 * HOUR, START + 3.5 * 24 * HOUR, START),  # 1 week window - middle
        (HOUR, START, START),  # start time equals now
        (HOUR, START - 10, START - 10),  # start in the future: a window of size 0
    ],
)
def test_tumbling_window_reset_times(window: float, now: float, reset: float) -> None:
    h = UsageHistory(UsageDB(window=window, window_type="tumbling", tumbling_start=START))
    assert h.window_start(now) == reset


def test_a_tumbling_window_starts_from_nothing_at_its_reset() -> None:
    h = UsageHistory(UsageDB(window=HOUR, window_type="tumbling", tumbling_start=START))
    h.record(START, {"a": gpus(4)}, gpus(4))
    assert h.usage(START + 1800)["a"].gpu == pytest.approx(1.0)
    h.record(START + 1800, {"a": gpus(0)}, gpus(4))
    assert h.usage(START + HOUR + 600).get("a", Res()).gpu == pytest.approx(0.0)


# ------------------------------------------------ kept in the Queue's status
def test_the_history_survives_a_restart_through_the_queue_status() -> None:
    params = UsageDB(window=HOUR, half_life=600.0)
    h = UsageHistory(params)
    h.record(0.0, {"a": gpus(3), "b": gpus(1)}, gpus(4))
    h.record(1200.0, {"a": gpus(0), "b": gpus(4)}, gpus(4))
    h.usage(1800.0)
    statuses = [(name, h.to_status(name)) for name in ("a", "b")]
    again = UsageHistory(params)
    assert again.load(statuses) == []
    for name in ("a", "b"):
        assert again.usage(1800.0)[name].gpu == pytest.approx(h.usage(1800.0)[name].gpu)
    other = UsageHistory(UsageDB(window=2 * HOUR))
    assert other.load(statuses) == [
        "Queue a: status.usageHistory: kept for another window; usage starts over",
        "Queue b: status.usageHistory: kept for another window; usage starts over",
    ]
