"""The spec's value types, shared by the job spec (``spec.py``) and each backend's own section
(``backends/<name>/settings.py``): sizes with units, durations, names, and the strict base model."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema

NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,62}$"


class SpecError(ValueError):
    """A job spec that cannot run. ``problems`` holds one line per bad field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid job spec:\n  " + "\n  ".join(problems))


# --- value types -------------------------------------------------------------

_MEMORY_UNITS = {
    "b": 1,
    "k": 10**3, "kb": 10**3, "ki": 2**10, "kib": 2**10,
    "m": 10**6, "mb": 10**6, "mi": 2**20, "mib": 2**20,
    "g": 10**9, "gb": 10**9, "gi": 2**30, "gib": 2**30,
    "t": 10**12, "tb": 10**12, "ti": 2**40, "tib": 2**40,
}  # fmt: skip
_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_SIZE_PATTERN = r"^\s*\d+(\.\d+)?\s*([kKmMgGtT][iI]?[bB]?|[bB])\s*$"  # what _MEMORY_UNITS accepts
SIZE_HINT = "give a unit, e.g. '512Mi', '4Gi', '64Mi', '1G' or '100k' (a bare number is refused: MiB or bytes?)"
SIZE_RULE = ("A size needs a unit: B; k, M, G, T (powers of 1000); Ki, Mi, Gi, Ti (powers of 1024), "
             "e.g. '512Mi'. A bare number is refused.")


def parse_memory(value: Any) -> int:
    """Bytes from ``"2Gi"``, ``"512MiB"``, ``"1.5G"``, ``"100B"``. Every size needs a unit: a bare number
    was read as MiB for memory and as bytes for task_size, and either reading is wrong for someone."""
    if isinstance(value, str):
        match = _MEMORY_RE.match(value)
        if match and match.group(2).lower() in _MEMORY_UNITS:
            return int(float(match.group(1)) * _MEMORY_UNITS[match.group(2).lower()])
        if match and not match.group(2):
            raise ValueError(SIZE_HINT)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(SIZE_HINT)
    raise ValueError("must be a size such as '2Gi', '512Mi' or '1G'")


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(value: Any) -> float:
    """Seconds from ``5``, ``2.5``, ``"500ms"``, ``"30s"``, ``"2m"``, ``"1h"``."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 5, '500ms', '30s' or '2m'")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        match = _DURATION_RE.match(value)
        if match:
            return float(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"]
    raise ValueError("must be a duration such as 5, '500ms', '30s' or '2m'")


def _stringify_env(value: Any) -> Any:
    # YAML turns `FOO: 1` into an int; environment values are strings.
    if isinstance(value, dict):
        return {k: (str(v).lower() if isinstance(v, bool) else str(v)) if isinstance(v, (int, float)) else v
                for k, v in value.items()}
    return value


def format_memory(value: int) -> str:
    """The shortest exact spelling, so that a dumped spec loads back to the same bytes."""
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value % size == 0:
            return f"{value // size}{unit}"
    return f"{value}B"


# Every size of the spec: given as a string with a unit, kept as bytes, dumped in the shortest exact spelling.
ByteSize = Annotated[int, BeforeValidator(parse_memory), Field(gt=0), PlainSerializer(format_memory),
                     WithJsonSchema({"type": "string", "pattern": _SIZE_PATTERN})]
Seconds = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]
Name = Annotated[str, Field(pattern=NAME_PATTERN)]


class StrictModel(BaseModel):
    """Base of every spec type: unknown keys are errors, values are checked on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


class BackendSettings(StrictModel):
    """Base of each backend's spec section (``backends/<name>/settings.py``): ``type`` names the
    backend and tells the sections apart."""

    type: str

    def submit_problems(self) -> list[str]:
        """What this section still lacks to submit (settings a connection may fill in after the spec
        was loaded), one line per field, checked before the cluster is contacted."""
        return []


# Key names whose values are secrets wherever they appear in a spec (a trainer's env, a consumer's
# config): shown as "***" on the page, in logs and in status documents.
# Kafka's (librdkafka's) own secrets: sasl.jaas.config, ssl.key.pem, ssl.keystore.password...
_SECRET_KEY = re.compile(r"pass(word|wd)?|secret|token|credential|private.?key|api.?key|auth|jaas|key\.pem",
                         re.IGNORECASE)
MASK = "***"


def mask_secrets(value: Any) -> Any:
    """``value`` (JSON-like) with the values of secret-looking keys replaced by ``***``."""
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and _SECRET_KEY.search(k) and v not in (None, "")
                else mask_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value
