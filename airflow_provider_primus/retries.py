"""Which errors are worth another try, and how the provider retries them (through tenacity).

Transient (retried with exponential backoff, each retry logged once with its cause):

- ``AMUnavailable``: the AM did not answer (refused, reset, timed out, HTTP 5xx);
- ``OSError``, which covers ``ConnectionError`` and ``TimeoutError`` (``asyncio.TimeoutError`` too),
  urllib's errors (YARN's ResourceManager and the WebHDFS job store) and requests' (WebHDFS through
  the hdfs provider); but not ``PermissionError``/``FileNotFoundError`` (retrying won't create the
  file or the right), nor an HTTP error below 500 other than 429;
- ``aiohttp.ClientConnectionError`` (the async hook's connection to the AM);
- the Kubernetes API server's answers 429 and 5xx (``ApiException``), and urllib3's connection
  errors to it (``MaxRetryError``, ``ProtocolError``, ``TimeoutError``).

Not transient, so they fail at once with their own message: ``AMRejected`` (a 4xx of the AM: bad
token, bad request), ``AMUntrusted`` (its certificate does not verify), ``JobNotFound``,
``SpecError``, and everything else (a bug shows its traceback rather than being retried).

Polling loops that wait for a state (the operator's wait, the triggers' loop, a kill's patience)
are not retries: they stay loops, and call the retried reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import aiohttp
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from primus_runtime.api_client import AMRejected, AMUnavailable
from primus_runtime.client import JobNotFound
from primus_runtime.spec import SpecError


def _optional_types(*names: tuple[str, str]) -> tuple[type[BaseException], ...]:
    """Exception types of packages that may be missing (kubernetes is an extra)."""
    found: list[type[BaseException]] = []
    for module, name in names:
        try:
            found.append(getattr(__import__(module, fromlist=[name]), name))
        except ImportError:
            continue
    return tuple(found)


#: Errors of the Kubernetes API server: transient only for 429 and 5xx (see ``is_transient``).
KUBERNETES_API_ERRORS = _optional_types(("kubernetes.client.exceptions", "ApiException"))
#: urllib3's errors when the Kubernetes API server cannot be reached (not ``OSError``s).
_URLLIB3_CONNECTION_ERRORS = _optional_types(("urllib3.exceptions", "MaxRetryError"),
                                             ("urllib3.exceptions", "ProtocolError"),
                                             ("urllib3.exceptions", "TimeoutError"))
#: Every type ``is_transient`` may say yes to (some only for some HTTP statuses).
TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    AMUnavailable, OSError, aiohttp.ClientConnectionError, asyncio.TimeoutError,
    *KUBERNETES_API_ERRORS, *_URLLIB3_CONNECTION_ERRORS)
#: Never retried, even where they are ``OSError``s.
NOT_TRANSIENT: tuple[type[BaseException], ...] = (AMRejected, JobNotFound, SpecError, PermissionError,
                                                  FileNotFoundError)
#: What a read of a job may end with that is about the job or its cluster, not a bug: the
#: transient errors once retries are exhausted, and the AM's refusals at once.
READ_ERRORS: tuple[type[BaseException], ...] = (AMRejected, *TRANSIENT_TYPES)

#: Attempts of one read before its error is raised, and the backoff between them (seconds:
#: 2, 4, 8, 16, plus up to ``JITTER``: tasks that failed together do not retry together).
ATTEMPTS = 5
BACKOFF_START, BACKOFF_MAX, JITTER = 2.0, 30.0, 1.0


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status an error carries (urllib's ``code``, kubernetes' and aiohttp's ``status``,
    requests' ``response.status_code``); None for an error without one."""
    for source in (exc, getattr(exc, "response", None)):
        for attribute in ("status", "code", "status_code"):
            value = getattr(source, attribute, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether asking again may succeed (the rules are in the module's docstring)."""
    if isinstance(exc, NOT_TRANSIENT) or not isinstance(exc, TRANSIENT_TYPES):
        return False
    if isinstance(exc, (OSError, *KUBERNETES_API_ERRORS)):
        status = _http_status(exc)
        return status is None or status == 429 or status >= 500
    return True


class _Log(Protocol):
    def warning(self, msg: Any, /, *args: Any) -> Any: ...


def _log_retry(what: str, log: _Log, attempts: int) -> Callable[[RetryCallState], None]:
    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning("%s failed (%s: %s); attempt %d of %d in %.0f s", what, type(exc).__name__, exc,
                    state.attempt_number + 1, attempts, delay)
    return before_sleep


def _policy(what: str, log: _Log, attempts: int) -> dict[str, Any]:
    return {"retry": retry_if_exception(is_transient), "stop": stop_after_attempt(attempts),
            "wait": wait_exponential(multiplier=BACKOFF_START, max=BACKOFF_MAX)
            + wait_random(0, JITTER),
            "before_sleep": _log_retry(what, log, attempts), "reraise": True}


def retrying(what: str, log: _Log, attempts: int = ATTEMPTS) -> Retrying:
    """Call a blocking read through this (``retrying(...)(read, *args)``): transient errors are
    retried, the last one raised as it was; ``what`` names the read in the retry lines."""
    return Retrying(**_policy(what, log, attempts))


def async_retrying(what: str, log: _Log, attempts: int = ATTEMPTS) -> AsyncRetrying:
    """``retrying`` for coroutines (``await async_retrying(...)(read, *args)``), sleeping on the loop."""
    return AsyncRetrying(**_policy(what, log, attempts))
