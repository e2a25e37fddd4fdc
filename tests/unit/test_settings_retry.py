from __future__ import annotations

import pytest

from relaymq import ConfigError, Settings
from relaymq.retry import exponential, fixed, next_delay


def test_settings_read_environment_twins() -> None:
    env = {
        "RELAYMQ_STALLED_THRESHOLD": "12.5",
        "RELAYMQ_ENABLE_STALLED_CHECK": "false",
        "RELAYMQ_MAX_STALLED": "7",
        "RELAYMQ_HEARTBEAT_INTERVAL": "2",
        "RELAYMQ_BACKEND": "memory://",
    }
    s = Settings.from_env(env, concurrency=4, shutdown_timeout=None)
    assert (s.stalled_threshold, s.enable_stalled_check, s.max_stalled) == (12.5, False, 7)
    assert (s.heartbeat_interval, s.backend, s.concurrency) == (2.0, "memory://", 4)
    assert s.shutdown_timeout == Settings().shutdown_timeout  # None overrides are ignored


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"RELAYMQ_MAX_STALLED": "many"}, "RELAYMQ_MAX_STALLED"),
        ({"RELAYMQ_ENABLE_STALLED_CHECK": "maybe"}, "RELAYMQ_ENABLE_STALLED_CHECK"),
        ({"RELAYMQ_HEARTBEAT_INTERVAL": "20"}, "at most half"),
        ({"RELAYMQ_CONCURRENCY": "0"}, "concurrency"),
    ],
)
def test_bad_settings_get_clear_errors(env: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Settings.from_env(env)


def test_exponential_backoff_grows_caps_and_never_comes_early() -> None:
    backoff = exponential(base=1, factor=2, cap=10, jitter=0.5)
    for attempt, plain in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 10), (9, 10)]:
        delays = [backoff(attempt) for _ in range(200)]
        assert min(delays) >= plain
        assert max(delays) <= plain * 1.5
    assert len({backoff(3) for _ in range(50)}) > 1  # jittered


def test_fixed_and_numeric_backoff() -> None:
    assert next_delay(fixed(3), 5) == 3
    assert next_delay(2.5, 1) == 2.5
    assert next_delay(lambda attempt: attempt * 10.0, 3) == 30
    with pytest.raises(ValueError):
        exponential(factor=0.5)
