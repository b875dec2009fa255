"""The retry backoff (KIP-580) and the metadata refresh schedule built on it, on a fake clock."""

from __future__ import annotations

import pytest

from sdk.client.backoff import ExponentialBackoff
from sdk.client.refresh_schedule import RefreshSchedule

MAX_AGE_MS = 300_000


def test_backoff_doubles_up_to_the_maximum_and_jitter_never_exceeds_it():
    backoff = ExponentialBackoff(100, 1000, jitter=0.2)
    for attempts in range(12):
        nominal = min(100 * 2**attempts, 1000)
        for _ in range(200):
            value = backoff.backoff_ms(attempts)
            assert 0.8 * nominal <= value <= min(1.2 * nominal, 1000)


def test_backoff_with_a_maximum_below_the_initial_value_is_that_maximum():
    # Kafka: "retry.backoff.max.ms will be used as a constant backoff from the beginning".
    backoff = ExponentialBackoff(2000, 1000)
    assert {backoff.backoff_ms(n) for n in range(5)} == {1000}
    assert backoff.initial_ms == 1000


def test_constant_backoff_has_no_jitter():
    assert {ExponentialBackoff(50, 50).backoff_ms(n) for n in range(50)} == {50}


def test_zero_backoff_stays_zero():
    assert {ExponentialBackoff(0, 1000).backoff_ms(n) for n in range(5)} == {0}


@pytest.mark.parametrize(
    ("initial", "maximum", "options"),
    [(-1, 10, {}), (1, -10, {}), (1, 10, {"multiplier": 0.5}), (1, 10, {"jitter": 1.5})],
)
def test_backoff_rejects_bad_settings(initial, maximum, options):
    with pytest.raises(ValueError):
        ExponentialBackoff(initial, maximum, **options)


def _schedule() -> RefreshSchedule:
    schedule = RefreshSchedule(ExponentialBackoff(100, 1000, jitter=0), MAX_AGE_MS)
    schedule.succeeded(0, incomplete=False)  # the bootstrap refresh
    return schedule


def test_without_requests_the_next_refresh_is_at_max_age():
    schedule = _schedule()
    assert schedule.time_to_next_ms(1000) == MAX_AGE_MS - 1000
    assert schedule.time_to_next_ms(MAX_AGE_MS + 5) == 0


def test_a_request_waits_the_initial_backoff_after_the_last_refresh():
    schedule = _schedule()
    schedule.request()
    assert schedule.time_to_next_ms(30) == 70
    assert schedule.time_to_next_ms(100) == 0


def test_new_topics_are_refreshed_at_once_even_when_added_during_a_refresh():
    schedule = _schedule()
    schedule.request_for_new_topics()
    assert schedule.time_to_next_ms(1) == 0
    schedule.started()
    schedule.request_for_new_topics()  # added while that refresh is on the wire
    schedule.succeeded(10, incomplete=False)
    assert schedule.time_to_next_ms(11) == 0


def test_incomplete_answers_are_asked_again_with_a_growing_backoff():
    schedule = _schedule()
    now = 0.0
    waits = []
    for _ in range(6):
        schedule.started()
        schedule.succeeded(now, incomplete=True)
        wait = schedule.time_to_next_ms(now)
        waits.append(wait)
        now += wait
    assert waits == [100, 200, 400, 800, 1000, 1000]
    schedule.started()
    schedule.succeeded(now, incomplete=False)  # the topic is ready: no retry due, backoff reset
    assert schedule.time_to_next_ms(now) == MAX_AGE_MS
    schedule.request()
    assert schedule.time_to_next_ms(now) == 100


def test_a_new_topic_resets_the_incomplete_backoff():
    schedule = _schedule()
    for now in (0, 100, 300, 700):
        schedule.started()
        schedule.succeeded(now, incomplete=True)
    schedule.request_for_new_topics()
    assert schedule.time_to_next_ms(701) == 0
    schedule.started()
    schedule.succeeded(710, incomplete=True)
    assert schedule.time_to_next_ms(710) == 100


def test_failed_refreshes_back_off_exponentially_and_a_success_resets_them():
    schedule = _schedule()
    waits = []
    now = 0.0
    for _ in range(5):
        schedule.started()
        schedule.failed(now)
        wait = schedule.time_to_next_ms(now)
        waits.append(wait)
        now += wait
    assert waits == [100, 200, 400, 800, 1000]
    schedule.started()
    schedule.succeeded(now, incomplete=False)
    assert schedule.failures == 0
