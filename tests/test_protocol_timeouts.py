"""The executor's request timeout against the AM's heartbeat timeout (protocol.request_timeout)."""

from __future__ import annotations

import pytest

from primus_runtime.protocol import long_poll_seconds, request_timeout


@pytest.mark.parametrize(("interval", "timeout"), [(0.25, 3.0), (1.0, 10.0), (1.0, 30.0), (0.5, 5.0), (2.0, 60.0)])
def test_a_request_eaten_at_the_end_of_an_outage_of_half_the_timeout_is_retried_in_time(interval, timeout):
    """The worst case of an outage of half the heartbeat timeout: the last heartbeat before it
    arrived an interval before it began, and a request sent at its very end is eaten: the retry
    must reach the AM before the timeout. With (timeout - interval) / 2 the chaos suite's
    net_drop (0.25 s, 3 s, a 1.5 s blackhole) had an executor declared lost on YARN:
    0.25 + 1.5 + 1.375 = 3.125 s of silence."""
    silence = interval + timeout / 2 + request_timeout(interval, timeout)
    assert silence < timeout, silence


@pytest.mark.parametrize(("interval", "timeout"), [(0.25, 3.0), (1.0, 30.0), (1.0, 10.0), (5.0, 300.0)])
def test_a_long_poll_is_answered_before_its_request_times_out(interval, timeout):
    assert long_poll_seconds(interval, timeout) < request_timeout(interval, timeout)
    assert request_timeout(interval, timeout) <= interval + 5.0  # the AM is asked again at least that often
