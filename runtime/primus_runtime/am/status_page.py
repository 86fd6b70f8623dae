"""The job's status page: what the Airflow "Primus job" link opens.

Read-only and served without the job token (a browser following a link has none): it shows
the job's state, roles, executors, data progress and recent events, and never the token, the
trainers' commands or their environment. Whoever can reach the AM's address can read it; the
API next to it still requires the token for everything. It refreshes itself every few seconds.
"""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any

REFRESH_SECONDS = 5
EVENTS_SHOWN = 30

_STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
th{background:#f3f3f3}.succeeded{color:#17803d}.failed,.lost{color:#b42318}.killed,.stopped{color:#888}
.running{color:#1d4ed8}"""


def _time(epoch: float | None) -> str:
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S") if epoch else ""


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="{escape(str(c))}">{escape(str(c))}</td>' for c in row) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _data_section(data: dict[str, Any] | None) -> str:
    if not data:
        return ""
    tasks = data.get("tasks", {})
    rows = [[key, value] for key, value in (
        ("state", data.get("state")),
        ("progress", f"{100 * float(data.get('progress') or 0):.1f}%"),
        ("tasks", ", ".join(f"{n} {k}" for k, n in tasks.items())),
        ("watermark", data.get("watermark") or "none"),
        ("rate", f"{float(data.get('rate_bytes_per_s') or 0) / 2**20:.1f} MiB/s"),
        ("eta", f"{data['eta_seconds']:.0f} s" if data.get("eta_seconds") is not None else ""),
    )]
    return "<h2>Data</h2>" + _table(["", ""], rows)


def render(status: dict[str, Any]) -> str:
    """The page for one status snapshot (``JobRecord.to_dict()``)."""
    job = status["job"]
    roles = _table(["role", "replicas", "states", "restarts"], [
        [r["name"], r["replicas"], ", ".join(f"{n} {s}" for s, n in r["states"].items() if n), r["restarts"]]
        for r in status["roles"]
    ])
    executors = _table(["executor", "state", "host", "ports", "restarts", "exit code", "reason"], [
        [e["id"], e["state"], e.get("host") or "", ",".join(map(str, e.get("ports") or [])), e.get("restarts", 0),
         "" if e.get("exit_code") is None else e["exit_code"], e.get("reason") or ""]
        for e in status["executors"]
    ])
    events = _table(["time", "subject", "change", "reason"], [
        [_time(e["time"]), e["subject"], f"{e['from_state'] or ''} -> {e['to_state']}", e.get("reason") or ""]
        for e in status["events"][-EVENTS_SHOWN:][::-1]
    ])
    title = f"Primus job {job['name']} ({job['app_id']})"
    return (f'<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" '
            f'content="{REFRESH_SECONDS}"><title>{escape(title)}</title><style>{_STYLE}</style></head><body>'
            f"<h1>{escape(title)}</h1>"
            f'<p>state <b class="{escape(job["state"])}">{escape(job["state"])}</b>'
            f"{' - ' + escape(job['reason']) if job.get('reason') else ''}; "
            f"started {_time(job.get('started_at'))}</p>"
            f"<h2>Roles</h2>{roles}<h2>Executors</h2>{executors}{_data_section(status.get('data'))}"
            f"<h2>Recent events</h2>{events}</body></html>")
