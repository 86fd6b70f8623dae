"""A real Airflow (scheduler, dag-processor, triggerer, api-server) for tests and benchmarks.

Each component runs as its own ``airflow`` subprocess, in its own session, with a private
AIRFLOW_HOME (SQLite; LocalExecutor, which Airflow 3.3 allows on SQLite) and a private
PRIMUS_HOME. Only the api-server listens on a port: a free one on 127.0.0.1. The scheduler and
the triggerer do not serve logs (the api-server reads the task log files of the shared home).

    live = LiveAirflow(tmp_dir, dags_folder)
    live.start()             # db migrate, start the components, wait until healthy
    live.trigger_dag(...)    # everything else through the public REST API /api/v2
    live.restart("triggerer")  # stop one component, start it again, wait for its heartbeat
    live.stop()              # SIGTERM, SIGKILL after a timeout, then nothing of it is left

The REST API is authenticated the way Airflow 3.3's simple auth manager allows with
``[core] simple_auth_manager_all_admins = True``: ``GET /auth/token`` hands out an admin JWT. With
``users`` (name -> role: ``{"admin": "admin", "viewer": "viewer"}``) the simple auth manager has those
users instead, each with a password of ``passwords`` (its passwords file, written before the start);
``token()`` is then an admin's JWT (``POST /auth/token``), ``token_for(name)`` anyone's.

No pytest and no Airflow imports here: the benchmark uses it too, and Airflow reads its
configuration once, at import, from the environment of the importing process.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from conftest import wait_for
from primus_runtime.backends.local.jobs import processes_of_job

REPO = Path(__file__).resolve().parents[2]
LIVE_DAGS = Path(__file__).resolve().parent / "live_dags"
EXAMPLE_DAGS = REPO / "example_dags"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
COMPONENTS = ("scheduler", "dag-processor", "triggerer", "api-server")
#: The provider's Airflow plugin (the "Primus job" link's page), as its entry point names it.
PRIMUS_PLUGIN = "airflow_provider_primus.plugins:PrimusPlugin"
#: Seconds a component gets to stop after SIGTERM before its whole session is SIGKILLed.
STOP_TIMEOUT = 20.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _environments() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, environment entries) of every process this user may read, except this one."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                yield int(pid), f.read().split(b"\0")
        except OSError:
            pass


def pids_with_env(entry: str) -> list[int]:
    """Pids (not this process) whose environment holds exactly ``entry`` (``NAME=value``)."""
    needle = entry.encode()
    return [pid for pid, entries in _environments() if needle in entries]


def _pids_with_env_name(name: str) -> set[int]:
    prefix = f"{name}=".encode()
    return {pid for pid, entries in _environments() if any(item.startswith(prefix) for item in entries)}


def cmdline(pid: int) -> str | None:
    """The command line of ``pid`` as one string (as ``setproctitle`` sets it), None if it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").strip().decode(errors="replace")
    except OSError:
        return None


def pids_with_cmdline(line: str) -> list[int]:
    """Pids whose command line is exactly ``line``."""
    return [int(pid) for pid in filter(str.isdigit, os.listdir("/proc")) if cmdline(int(pid)) == line]


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after ``pid (comm)``: state, ppid, pgrp, session, ..."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _session(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[3]) if fields is not None else None


def parent_pid(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields is not None else None


def ancestors(pid: int) -> list[int]:
    """The parent, grandparent, ... of ``pid`` up to init."""
    chain = []
    while (pid := parent_pid(pid) or 0) > 1:
        chain.append(pid)
    return chain


def descendants(roots: list[int]) -> list[int]:
    """Every living descendant of the ``roots`` pids (not the roots)."""
    children: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        ppid = parent_pid(int(pid))
        if ppid is not None:
            children.setdefault(ppid, []).append(int(pid))
    found, todo = [], list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def epoch(iso_time: str) -> float:
    """Seconds since the epoch of an ISO 8601 time from the API (UTC when it names no zone)."""
    moment = datetime.fromisoformat(iso_time)
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


class PortTaken(RuntimeError):
    pass


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: str):
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")
        self.status = status


class LiveAirflow:
    """The four Airflow components as subprocesses, and a small client of their REST API.

    :param root: a private directory: AIRFLOW_HOME, PRIMUS_HOME and the components' logs go there.
    :param dags_folder: ``[core] dags_folder``.
    :param with_examples: also serve ``example_dags/`` (a second local DAG bundle), so the
        repository's example DAGs run unchanged.
    :param env: more environment for the components (e.g. ``AIRFLOW__...`` settings).
    :param users: the simple auth manager's users, name -> role (``admin``, ``op``, ``user``,
        ``viewer``), signing in with ``passwords[name]``; default: everyone is an admin, no password.
    """

    def __init__(self, root: Path, dags_folder: Path = LIVE_DAGS, with_examples: bool = False,
                 env: dict[str, str] | None = None, users: dict[str, str] | None = None):
        self.root = Path(root)
        self.airflow_home = self.root / "airflow-home"
        self.primus_home = self.root / "primus-home"
        self.log_dir = self.root / "component-logs"
        for path in (self.airflow_home, self.primus_home, self.log_dir):
            path.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen] = {}
        self._token: str | None = None
        self.users = dict(users or {})
        self.passwords = {name: secrets.token_urlsafe(12) for name in self.users}
        self.env = self._environment(Path(dags_folder), with_examples, env or {})
        if self.users:
            self.env.update(self._users_environment())
        self._provide_primus_plugin()

    def _users_environment(self) -> dict[str, str]:
        """The simple auth manager's settings for ``users``, and their passwords file: the api-server
        generates a password only for a user the file does not have."""
        passwords_file = self.airflow_home / "simple_auth_manager_passwords.json"
        passwords_file.write_text(json.dumps(self.passwords) + "\n")
        return {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{n}:{r}" for n, r in self.users.items()),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file)}

    def _provide_primus_plugin(self) -> None:
        """The provider's plugin comes with the installed distribution's ``airflow.plugins`` entry
        point; a venv installed before that entry point existed gets it from the plugins folder
        instead (both at once would register it twice)."""
        if any(point.value == PRIMUS_PLUGIN for point in entry_points(group="airflow.plugins")):
            return
        folder = self.airflow_home / "plugins"
        folder.mkdir(exist_ok=True)
        module, _, name = PRIMUS_PLUGIN.partition(":")
        (folder / "primus_plugin.py").write_text(f"from {module} import {name}  # noqa: F401\n")

    def _environment(self, dags_folder: Path, with_examples: bool, extra: dict[str, str]) -> dict[str, str]:
        # Nothing of the caller's Airflow settings (a test session sets its own AIRFLOW_HOME).
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AIRFLOW_", "AIRFLOW__")) and k != "PRIMUS_HOME"}
        env.update({
            "AIRFLOW_HOME": str(self.airflow_home),
            "PRIMUS_HOME": str(self.primus_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__AUTH_MANAGER":
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
            # Every component signs or checks the task JWTs: one shared secret.
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            # Quick reactions, so a test does not wait on default intervals.
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            # A task whose supervisor is gone is failed after 30 s instead of 300 s.
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
            "AIRFLOW__USAGE_DATA_COLLECTION__ENABLED": "False",
            "PYTHONUNBUFFERED": "1",
        })
        if with_examples:
            env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps([
                {"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                 "kwargs": {}},
                {"name": "example-dags", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                 "kwargs": {"path": str(EXAMPLE_DAGS), "refresh_interval": 5}},
            ])
        env.update(extra)
        return env

    # --- life cycle ---------------------------------------------------------------

    def start(self, timeout: float = 240.0) -> None:
        """Migrate the database, start the components and wait until the API says all are healthy."""
        with open(self.log_dir / "db-migrate.log", "wb") as log:
            done = subprocess.run([AIRFLOW, "db", "migrate"], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{self.tail('db-migrate')}")
        for attempt in range(3):
            self._start_components()
            try:
                wait_for(self._healthy, timeout, "the Airflow components to report healthy", poll=1.0)
                return
            except PortTaken:  # another process took the free port first: a new port, once more
                self.stop()
                if attempt == 2:
                    raise RuntimeError(f"no free port for the api-server:\n{self.report()}") from None
                self._use_port(free_port())
            except BaseException as exc:
                self.stop()
                raise RuntimeError(f"Airflow did not start: {exc}\n{self.report()}") from exc

    def _use_port(self, port: int) -> None:
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.env.update({
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": self.base_url,
        })

    def _start_components(self) -> None:
        for name in COMPONENTS:
            self._start_component(name)

    def _start_component(self, name: str) -> None:
        args = [AIRFLOW, name]
        if name in ("scheduler", "triggerer"):
            args.append("--skip-serve-logs")
        with open(self.log_dir / f"{name}.log", "ab") as log:
            log.write(f"===== airflow {name} on port {self.port} =====\n".encode())
            log.flush()
            # Own session: stop() reaches the component's children (executor workers, task
            # supervisors, parsers) through the process group.
            self.procs[name] = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True)

    def restart(self, name: str, timeout: float = 120.0) -> None:
        """Stop one component as an operator would (SIGTERM to its session, SIGKILL after
        STOP_TIMEOUT) and start it again; returns once the API reports a heartbeat of the new one."""
        if name not in ("scheduler", "dag-processor", "triggerer"):
            raise ValueError(f"name: restart one of scheduler, dag-processor, triggerer, got {name!r}")
        proc = self.procs.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(STOP_TIMEOUT)
        with contextlib.suppress(ProcessLookupError):  # what is left of its session
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        restarted = time.time()
        self._start_component(name)
        key = "latest_" + name.replace("-", "_") + "_heartbeat"

        def beating() -> bool:
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"airflow {name} exited with {self.procs[name].returncode}:\n{self.tail(name)}")
            part = self._request("GET", "/api/v2/monitor/health", auth=False).get(name.replace("-", "_"), {})
            beat = part.get(key)
            return part.get("status") == "healthy" and beat is not None and epoch(beat) > restarted
        wait_for(beating, timeout, f"the restarted {name} to report healthy", poll=1.0)

    def log_since_start(self, name: str) -> str:
        """The component's log since it was last started."""
        text = (self.log_dir / f"{name}.log").read_text(errors="replace")
        return text.rsplit(f"===== airflow {name} on port ", 1)[-1]

    def _healthy(self) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                if name == "api-server" and "address already in use" in self.log_since_start("api-server").lower():
                    raise PortTaken(self.port)
                raise RuntimeError(f"airflow {name} exited with {proc.returncode}:\n{self.tail(name)}")
        # Only our api-server answers on the port (not another one that took it first).
        if f"Uvicorn running on {self.base_url}" not in self.log_since_start("api-server"):
            return False
        try:
            health = self._request("GET", "/api/v2/monitor/health", auth=False)
        except (OSError, ApiError):
            return False
        return all(health.get(part, {}).get("status") == "healthy"
                   for part in ("metadatabase", "scheduler", "triggerer", "dag_processor"))

    def stop(self) -> list[int]:
        """SIGTERM every component's session, SIGKILL what is left after STOP_TIMEOUT, then SIGKILL
        whatever left the sessions: descendants of the components, processes carrying this
        AIRFLOW_HOME in their environment (the AMs of Primus jobs that tasks left running among them),
        and every process of the Primus jobs under this PRIMUS_HOME.

        Returns the pids of Airflow processes (not Primus jobs') that only that last step stopped:
        none is expected."""
        sessions = {proc.pid for proc in self.procs.values()}  # each component leads its own session
        tree = descendants(list(sessions))
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):  # children left in the session
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self.procs.clear()
        # A task's Primus job has its own session by design; nothing else should have left. (What
        # is still in a component's session was SIGKILLed above and is only dying.)
        escaped = {pid for pid in [*tree, *pids_with_env(f"AIRFLOW_HOME={self.airflow_home}")]
                   if _alive(pid) and _session(pid) not in sessions}
        primus_jobs = _pids_with_env_name("PRIMUS_APP_ID")
        # A job's executors and trainers carry none of Airflow's environment (the local backend hands
        # them a short allow-list of the AM's): they are found by their job's PRIMUS_APP_ID.
        job_processes = [pid for job in (self.primus_home / "jobs").glob("*") for pid in processes_of_job(job.name)]
        for pid in [*escaped, *job_processes]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return sorted(escaped - primus_jobs)

    def __enter__(self) -> LiveAirflow:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- logs -----------------------------------------------------------------------

    def tail(self, name: str, lines: int = 40) -> str:
        path = self.log_dir / f"{name}.log"
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return f"({path} not written)"
        return "\n".join(text.splitlines()[-lines:])

    def task_log_files(self, dag_id: str) -> list[Path]:
        return sorted((self.airflow_home / "logs").glob(f"dag_id={dag_id}/**/*.log"))

    def report(self, dag_id: str | None = None, lines: int = 40) -> str:
        """The components' log tails and (for ``dag_id``) its task logs' tails, to explain a failure."""
        parts = [f"===== {name} (last {lines} lines) =====\n{self.tail(name, lines)}" for name in COMPONENTS]
        for path in self.task_log_files(dag_id) if dag_id else []:
            text = "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            parts.append(f"===== {path.relative_to(self.airflow_home)} =====\n{text}")
        return "\n".join(parts)

    @contextlib.contextmanager
    def explain_failure(self, dag_id: str | None = None) -> Iterator[None]:
        """Print the logs' tails (pytest shows them with the failure) when the block raises."""
        try:
            yield
        except BaseException:
            print(self.report(dag_id), flush=True)
            raise

    # --- REST API ---------------------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None, auth: bool = True,
                 accept: str = "application/json") -> Any:
        headers = {"Accept": accept}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                raw = reply.read().decode()
        except urllib.error.HTTPError as exc:
            raise ApiError(method, path, exc.code, exc.read().decode(errors="replace")) from None
        if accept != "application/json":
            return raw
        return json.loads(raw) if raw else None

    def token(self) -> str:
        """An admin JWT: with simple_auth_manager_all_admins, ``GET /auth/token`` needs no password;
        with ``users``, the first admin's."""
        if self._token is None:
            if self.users:
                admin = next(name for name, role in self.users.items() if role == "admin")
                self._token = self.token_for(admin)
            else:
                self._token = self._request("GET", "/auth/token", auth=False)["access_token"]
        return self._token

    def token_for(self, name: str) -> str:
        """A JWT of one of ``users``, signed in with its password (``POST /auth/token``)."""
        body = {"username": name, "password": self.passwords[name]}
        return self._request("POST", "/auth/token", body, auth=False)["access_token"]

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """``method`` on ``/api/v2`` + ``path`` (JSON in, JSON out). A "Database error" (SQLite locked by
        the scheduler's writes on a loaded machine: the request was rolled back) is tried again, twice."""
        for attempt in range(3):
            try:
                return self._request(method, "/api/v2" + path, body)
            except ApiError as exc:
                if exc.status != 500 or "Database error" not in str(exc) or attempt == 2:
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")

    def wait_for_dag(self, dag_id: str, timeout: float = 120.0) -> dict[str, Any]:
        """The DAG, once the dag-processor has parsed it (and it is not paused)."""
        def parsed() -> dict[str, Any] | None:
            try:
                dag = self.api("GET", f"/dags/{dag_id}")
            except ApiError as exc:
                if exc.status == 404:
                    return None
                raise
            if dag.get("is_paused"):
                self.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})
            return dag
        return wait_for(parsed, timeout, f"DAG {dag_id} to be parsed", poll=1.0)

    def trigger_dag(self, dag_id: str, conf: dict[str, Any] | None = None, run_id: str | None = None) -> str:
        """POST a manual DAG run (as the UI's Trigger button does); its run id."""
        body: dict[str, Any] = {"logical_date": None, "conf": conf or {}}
        if run_id is not None:
            body["dag_run_id"] = run_id
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", body)
        return run["dag_run_id"]

    def delete_dag_run(self, dag_id: str, run_id: str) -> None:
        self.api("DELETE", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
                               f"/taskInstances/{task_id}")

    def set_task_state(self, dag_id: str, run_id: str, task_id: str, state: str) -> Any:
        """PATCH the task instance's state, as the UI's "Mark as failed/success" does."""
        return self.api("PATCH", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
                                 f"/taskInstances/{task_id}", {"new_state": state})

    def task_log_records(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> list[dict[str, Any]]:
        """The log of one try (the task's and its triggers'), as the API's structured records
        (``event``, ``timestamp``, ...)."""
        reply = self.api("GET", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
                                f"/taskInstances/{task_id}/logs/{try_number}?full_content=true")
        content = reply.get("content", [])
        if isinstance(content, str):
            content = content.splitlines()
        return [item if isinstance(item, dict) else {"event": str(item)} for item in content]

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """The log of one try as text: its records' events, one a line."""
        return "\n".join(str(record.get("event", ""))
                         for record in self.task_log_records(dag_id, run_id, task_id, try_number))

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str) -> Any:
        reply = self.api("GET", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
                                f"/taskInstances/{task_id}/xcomEntries/{key}")
        return reply["value"]

    def wait_for_task_state(self, dag_id: str, run_id: str, task_id: str, states: tuple[str, ...],
                            timeout: float = 180.0) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            ti = self.task_instance(dag_id, run_id, task_id)
            return ti if ti["state"] in states else None
        return wait_for(reached, timeout, f"{dag_id}.{task_id} ({run_id}) to be {'/'.join(states)}", poll=0.5)

    def wait_for_run_state(self, dag_id: str, run_id: str, states: tuple[str, ...] = ("success", "failed"),
                           timeout: float = 240.0) -> dict[str, Any]:
        def ended() -> dict[str, Any] | None:
            run = self.dag_run(dag_id, run_id)
            return run if run["state"] in states else None
        return wait_for(ended, timeout, f"DAG run {dag_id} {run_id} to be {'/'.join(states)}", poll=1.0)
