"""Why the AM refuses a user's control: errors of the job's domain, not of HTTP.

The controls (``controls.py``) raise them; the REST API (``server.py``) alone turns each kind into
a status code. Their message is what the user reads, as it is.
"""

from __future__ import annotations


class ControlRefused(Exception):
    """A control the job cannot carry out (the base of the kinds below)."""


class NotFound(ControlRefused):
    """It names something the job does not have: a role, an executor, a task, an input."""


class Conflict(ControlRefused):
    """It cannot be done in the state the job (or what it names) is in now."""


class Invalid(ControlRefused):
    """Its arguments can never be right (a negative replica count, a relative directory...)."""
