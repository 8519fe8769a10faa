"""One retry policy, keyed on the error taxonomy (tenacity underneath): what is retried is decided by the error's
class (`ingest.errors`), never by its message. Exponential backoff, `first` seconds doubling up to `cap`; with
`jitter`, each wait is drawn uniformly below that (full jitter, for many clients sharing one throttled service)."""

from __future__ import annotations

import time
from collections.abc import Callable

from tenacity import (RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential,
                      wait_random_exponential)

from ingest.errors import LakelineError


def retrying(retry_on: tuple[type[LakelineError], ...], attempts: int, first: float = 1.0, cap: float = 8.0,
             on_retry: Callable[[int, BaseException, float], None] | None = None,
             sleep: Callable[[float], None] = time.sleep, jitter: bool = False) -> Retrying:
    """A tenacity `Retrying` for `for attempt in retrying(...): with attempt: ...`: up to `attempts` tries while the
    body raises one of `retry_on`, waiting first, 2*first, ... at most `cap` seconds; `on_retry(attempt, error,
    delay)` before each wait. The last error is re-raised as it is."""

    def before_sleep(state: RetryCallState) -> None:
        if on_retry is not None:
            on_retry(state.attempt_number, state.outcome.exception(), state.upcoming_sleep)

    wait = (wait_random_exponential if jitter else wait_exponential)(multiplier=first, max=cap)
    return Retrying(retry=retry_if_exception_type(retry_on), stop=stop_after_attempt(attempts), wait=wait,
                    before_sleep=before_sleep, sleep=sleep, reraise=True)
