"""The autoscaling policy alone (am/autoscaler.py): bounds, cooldown, hysteresis, the catch-up math."""

from __future__ import annotations

from typing import Any

import pytest

from primus_runtime.am.autoscaler import Autoscaler, Backlog
from primus_runtime.spec import Autoscale

KIB = 1024


def scaler(**policy: Any) -> Autoscaler:
    return Autoscaler("worker", Autoscale(**{"min_replicas": 1, "max_replicas": 4, "cooldown": 10, **policy}))


def files(amount: int, rate: float = 0.0, complete: bool = False) -> Backlog:
    return Backlog("files", amount, rate, complete, window=30.0)


def kafka(lag: int, rate: float = 0.0) -> Backlog:
    return Backlog("kafka", lag, rate, False, window=30.0)


def test_it_scales_up_to_the_target_within_max_once_a_cooldown_after_start():
    auto = scaler(target_lag=10_000)
    assert auto.decide(100.0, 2, kafka(120_000)) is None  # the first evaluation starts the cooldown
    assert auto.decide(105.0, 2, kafka(120_000)) is None
    decision = auto.decide(110.0, 2, kafka(120_000))
    assert decision is not None and decision.replicas == 4
    assert decision.reason == "backlog 120,000 records of lag > 2 x 10,000 per replica: 2 -> 4 (wants 12, max 4)"


def test_a_target_per_replica_asks_for_the_ceiling_and_names_sizes():
    auto = scaler(target_queued="1Mi", cooldown=1)
    auto.decide(0.0, 1, files(0))
    decision = auto.decide(1.0, 1, files(2 * 1024 * KIB + 1))
    assert decision is not None and decision.replicas == 3
    assert decision.reason == "backlog 2.0 MiB queued > 1 x 1.0 MiB per replica: 1 -> 3"


def test_no_second_change_within_the_cooldown_of_the_first():
    auto = scaler(target_lag=100, max_replicas=8)
    auto.decide(0.0, 1, kafka(0))
    assert auto.decide(10.0, 1, kafka(300)).replicas == 3  # type: ignore[union-attr]
    assert auto.decide(15.0, 3, kafka(800)) is None  # wants 8, but the last change was 5 s ago
    assert auto.decide(20.0, 3, kafka(800)).replicas == 8  # type: ignore[union-attr]


def test_a_target_that_does_not_fit_the_backlog_never_decides():
    assert all(scaler(target_lag=10).decide(t, 1, files(10**9)) is None for t in (0.0, 20.0, 40.0))
    assert all(scaler(target_queued="1Ki").decide(t, 1, kafka(10**9)) is None for t in (0.0, 20.0, 40.0))


def test_it_scales_down_only_after_a_whole_cooldown_of_wanting_fewer_and_to_the_most_wanted():
    auto = scaler(target_lag=100)
    auto.decide(0.0, 4, kafka(400))
    assert auto.decide(20.0, 4, kafka(150)) is None  # wants 2: below since 20
    assert auto.decide(25.0, 4, kafka(250)) is None  # wants 3
    assert auto.decide(29.0, 4, kafka(50)) is None  # wants 1, below for 9 s only
    decision = auto.decide(30.0, 4, kafka(50))
    assert decision is not None and decision.replicas == 3  # the most wanted in the window, not 1
    assert decision.reason == "backlog 50 records of lag <= 3 x 100 per replica for 10s: 4 -> 3"


def test_a_burst_in_between_restarts_the_wait_before_a_scale_down():
    auto = scaler(target_lag=100)
    auto.decide(0.0, 2, kafka(200))
    assert auto.decide(12.0, 2, kafka(50)) is None  # below since 12
    assert auto.decide(18.0, 2, kafka(200)) is None  # back at the target: the wait starts again
    assert auto.decide(20.0, 2, kafka(50)) is None  # below since 20
    assert auto.decide(29.0, 2, kafka(50)) is None
    decision = auto.decide(30.0, 2, kafka(50))
    assert decision is not None and decision.replicas == 1
    assert decision.reason == "backlog 50 records of lag <= 1 x 100 per replica for 10s: 2 -> 1"


def test_a_finishing_file_input_scales_down_without_the_wait():
    auto = scaler(target_queued="1Ki")
    auto.decide(0.0, 4, files(4 * KIB, complete=False))
    # Partitions still to be listed: a falling backlog may refill, so the wait applies.
    assert auto.decide(10.0, 4, files(2 * KIB, complete=False)) is None
    decision = auto.decide(11.0, 4, files(KIB, complete=True))
    assert decision is not None and decision.replicas == 1
    assert decision.reason == ("backlog 1.0 KiB queued <= 1 x 1.0 KiB per replica, the input finishing (every "
                               "partition listed): 4 -> 1")


def test_a_backlog_that_grows_again_is_not_finishing():
    auto = scaler(target_queued="1Ki")
    auto.decide(0.0, 4, files(4 * KIB, complete=True))
    assert auto.decide(5.0, 4, files(KIB, complete=True)) is None  # finishing, but within the cooldown
    assert auto.decide(10.0, 4, files(2 * KIB, complete=True)) is None  # a task re-queued: the wait applies
    decision = auto.decide(15.0, 4, files(3 * KIB, complete=True))  # growing still: after the wait
    assert decision is not None and decision.reason.endswith("<= 3 x 1.0 KiB per replica for 10s: 4 -> 3")


def test_an_empty_backlog_goes_to_min():
    auto = scaler(target_catchup=30, min_replicas=2)
    auto.decide(0.0, 4, files(0, complete=True))
    decision = auto.decide(10.0, 4, files(0, complete=True))
    assert decision is not None and decision.replicas == 2
    assert decision.reason == "no backlog, the input finishing (every partition listed): 4 -> 2 (min 2)"


def test_catch_up_time_asks_for_the_replicas_that_drain_the_backlog_in_time():
    auto = scaler(target_catchup=20, max_replicas=10)
    auto.decide(0.0, 2, kafka(10_000, rate=100.0))  # 2 replicas read 100 records/s: 50 each
    decision = auto.decide(40.0, 2, kafka(10_000, rate=100.0))
    # 10,000 records / (50 records/s * 20 s) = 10 replicas
    assert decision is not None and decision.replicas == 10
    assert decision.reason == "backlog 10,000 records of lag drains in 100s at 2 x 50 records/s > 20s: 2 -> 10 (max 10)"


def test_catch_up_waits_for_a_rate_before_it_judges():
    auto = scaler(target_catchup=20)
    auto.decide(0.0, 1, files(10**6, rate=0.0))
    assert auto.decide(30.0, 1, files(10**6, rate=0.0)) is None  # nothing read yet: no idea how long it takes
    decision = auto.decide(31.0, 1, files(10**6, rate=10_000.0))
    assert decision is not None and decision.replicas == 4  # 10^6 B / (10^4 B/s * 20 s) = 5, max 4


def test_the_rate_per_replica_covers_the_sizes_over_its_window():
    auto = scaler(target_catchup=10, max_replicas=20, cooldown=1)
    auto.decide(0.0, 2, kafka(1000, rate=20.0))
    assert auto.decide(30.0, 2, kafka(1000, rate=20.0)).replicas == 10  # type: ignore[union-attr]
    # 15 s later the 30 s window holds 15 s of 2 replicas and 15 s of 10: 6 on average, so the same
    # 20 records/s are 3.3/s per replica (not 2/s): 1000 / (3.33 * 10) = 30, max 20.
    decision = auto.decide(45.0, 10, kafka(1000, rate=20.0))
    assert decision is not None and decision.replicas == 20
    assert "at 10 x 3 records/s" in decision.reason


def test_a_pause_starts_afresh_a_cooldown_ahead():
    auto = scaler(target_lag=100)
    auto.decide(0.0, 2, kafka(50))  # wants 1 from here
    auto.pause()  # e.g. the input was suspended
    assert auto.decide(100.0, 2, kafka(50)) is None  # a new start: the cooldown again, and the wait
    assert auto.decide(105.0, 2, kafka(50)) is None
    assert auto.decide(110.0, 2, kafka(50)).replicas == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(("replicas", "lag", "expected", "reason"), [
    (0, 250, 3, "backlog 250 records of lag > 0 x 100 per replica: 0 -> 3"),  # a user scaled it to 0
    (6, 1000, 4, "backlog 1,000 records of lag <= 4 x 100 per replica for 10s: 6 -> 4 (wants 10, max 4)"),
])
def test_a_size_outside_the_bounds_is_brought_back(replicas, lag, expected, reason):
    auto = scaler(target_lag=100)
    auto.decide(0.0, replicas, kafka(lag))
    decision = auto.decide(10.0, replicas, kafka(lag))
    assert decision is not None and (decision.replicas, decision.reason) == (expected, reason)
