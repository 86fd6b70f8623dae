"""Primus path templates inside Airflow templates.

Input paths of a job spec name their time partitions as ``{{YYYY}}{{MM}}{{DD}}{{HH}}``, which is
Jinja syntax too: rendered by Airflow they would fail (undefined variables). The mixin below
keeps exactly those four placeholders as they are, so one string can hold both, e.g.
``/data/clicks/{{YYYY}}{{MM}}{{DD}}`` next to ``"{{ ds }}"`` elsewhere in the same spec.
"""

from __future__ import annotations

import re
from typing import Any

PARTITION_PLACEHOLDER = re.compile(r"\{\{\s*(YYYY|MM|DD|HH)\s*\}\}")


def keep_partition_placeholders(text: str) -> str:
    """``{{YYYY}}`` -> ``{{ "{{YYYY}}" }}``: Jinja then renders the placeholder back to itself."""
    return PARTITION_PLACEHOLDER.sub(lambda m: '{{ "{{' + m.group(1) + '}}" }}', text)


class PartitionPlaceholdersMixin:
    """For operators whose templated fields may hold Primus path templates."""

    def render_template(self, content: Any, context: Any, jinja_env: Any = None,
                        seen_oids: set[int] | None = None) -> Any:
        if isinstance(content, str):
            content = keep_partition_placeholders(content)
        return super().render_template(content, context, jinja_env, seen_oids)  # type: ignore[misc]
