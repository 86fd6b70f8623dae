"""``primus``: submit and manage Primus jobs from a shell.

Exit codes: 0 success (or a job that succeeded), 1 the job failed or was
lost, 2 bad usage, an invalid spec, or a log the job does not have (no such
executor, or not launched), 3 the job was killed, 4 no such job, 5 the AM
refused or could not be reached, 141 (128 + SIGPIPE, as a shell reports for
``cat``) its output's reader went away (``primus status APP | head -4``), said
nowhere. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from . import backends, hadoop, preflight
from .api_client import AMRejected, AMUntrusted
from .backends.base import ClientOptions
from .client import (
    JobNotFound,
    JobUnreachable,
    NoSuchLog,
    PrimusClient,
    data_progress,
    kafka_progress,
    progress_line,
    read_status,
    role_progress,
)
from .hadoop import HadoopConfigError, is_hdfs
from .models import AMAttempt, AutoscaleView, DataStatus, EventView, ExecutorView, Goodput, StatusSummary
from .spec import AUTOSCALE_TARGETS, JobSpec, SpecError, format_validation_error, load_spec
from .states import JOB_FINISHED, JOB_OUTCOMES, ExecutorState, JobState

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_KILLED, EXIT_NOT_FOUND, EXIT_UNREACHABLE = 0, 1, 2, 3, 4, 5
EXIT_STDOUT_CLOSED = 128 + 13  # what a shell reports for a command ended by SIGPIPE
# `primus status` lists every executor up to this many; beyond, the first this many not running (the
# ones to look at) and how to list them all: a job of 10,000 executors is not 10,000 lines.
EXECUTORS_LISTED = 50
NOT_RUNNING = tuple(state.value for state in ExecutorState if state is not ExecutorState.RUNNING)
# A failed job's status and `submit --wait` show the stderr tail of its first failed executors: this
# many lines of each, for at most this many (the page shows any one's whole log; `primus logs` too).
FAILED_TAIL_LINES, FAILED_TAIL_EXECUTORS = 10, 5
_OUTCOME_EXIT = {JobState.SUCCEEDED: EXIT_OK, JobState.FAILED: EXIT_FAILED, JobState.LOST: EXIT_FAILED,
                 JobState.KILLED: EXIT_KILLED}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    client = PrimusClient(options=ClientOptions(home=args.home, kube_config=args.kubeconfig,
                                                kube_context=args.context, namespace=args.namespace))
    try:
        code = int(args.func(client, args) or 0)
        sys.stdout.flush()  # here, where a reader gone is handled, not at the interpreter's exit
        return code
    except BrokenPipeError as exc:
        if not stdout_closed():  # a connection's, not the output's: said as any connection error
            print(f"primus: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
        # The reader of the output went away (`| head`): nothing more to say, and nowhere to say it.
        # Python would still flush stdout at exit and complain: it writes to /dev/null from now on.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_STDOUT_CLOSED
    except SpecError as exc:
        print(f"primus: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NoSuchLog as exc:
        print(f"primus: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except JobNotFound as exc:
        try:
            where = f" (looked in {client.cluster_for(exc.app_id).location()})"
        except JobNotFound:
            where = f" (not a job id of any backend: {', '.join(backends.NAMES)})"
        print(f"primus: {exc}{where}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except (HadoopConfigError, ConnectionError) as exc:
        print(f"primus: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except AMUntrusted as exc:
        print(f"primus: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except AMRejected as exc:
        print(f"primus: the AM refused: {exc.message}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except JobUnreachable as exc:
        print(f"primus: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return 130


def stdout_closed() -> bool:
    """Whether stdout is a pipe (or socket) whose reader went away: poll reports an error on it."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError):  # no stdout, or not a descriptor
        return False


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="primus", description="Run distributed training jobs with Primus.")
    parser.add_argument("--home", help="job home of the local backend (default $PRIMUS_HOME or ~/.primus)")
    parser.add_argument("--kubeconfig", help="kubernetes: the kubeconfig file (default $KUBECONFIG, "
                        "~/.kube/config, or in-cluster)")
    parser.add_argument("--context", help="kubernetes: the kubeconfig context")
    parser.add_argument("--namespace", help="kubernetes: the namespace to list or submit jobs in")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("submit", help="submit a job spec (YAML or JSON); prints the app id")
    p.add_argument("spec")
    p.add_argument("--wait", action="store_true", help="show progress and exit with the job's outcome")
    p.add_argument("--backend", choices=backends.NAMES,
                   help="run on this backend instead of the spec's (with its default settings): "
                   + "; ".join(f"{info.name}: {info.summary}" for info in backends.BACKENDS.values()))
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("status", help="show a job's state, roles and executors")
    p.add_argument("app_id")
    p.add_argument("--json", action="store_true", help="the full status as JSON")
    p.add_argument("--executors", action="store_true",
                   help=f"list every executor (without it: every one up to {EXECUTORS_LISTED}, else the first "
                        f"{EXECUTORS_LISTED} not running)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("logs", help="print a log (the AM's, or an executor's with --role)")
    p.add_argument("app_id")
    p.add_argument("--role")
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--stream", choices=("stdout", "stderr", "executor"), default="stdout")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    p.add_argument("--attempt", type=int, help="an earlier one: with --role, the executor's incarnation (0 the "
                   "first, 1 after one restart: its `restarts`); without, the AM's attempt (1 the first)")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("kill", help="stop a job (graceful, then forced)")
    p.add_argument("app_id")
    p.add_argument("--reason", default="")
    p.set_defaults(func=cmd_kill)

    p = sub.add_parser("scale", help="change a role's replicas while the job runs")
    p.add_argument("app_id")
    p.add_argument("role")
    p.add_argument("replicas", type=int)
    p.set_defaults(func=cmd_scale)

    p = sub.add_parser("data", help="show, suspend, resume or savepoint the job's input")
    p.add_argument("action", choices=("status", "suspend", "resume", "savepoint"))
    p.add_argument("app_id")
    p.add_argument("dir", nargs="?", help="savepoint: the directory to write task positions to")
    p.add_argument("--json", action="store_true", help="the data status as JSON")
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("ui", help="the job's web page: a sign-in link to its AM's page while it runs, else a "
                                  "local history server showing the page as the job left it")
    p.add_argument("app_id")
    p.add_argument("--host", default="127.0.0.1", help="history server: the address to listen on")
    p.add_argument("--port", type=int, default=0, help="history server: the port (default: any free one)")
    p.set_defaults(func=cmd_ui)
    p = sub.add_parser("history", help="list finished jobs, newest first (primus ui APP shows one)")
    p.add_argument("--backend", choices=backends.NAMES, default=backends.DEFAULT)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_history)
    p = sub.add_parser("list", help="list jobs, newest first")
    p.add_argument("--backend", choices=backends.NAMES, default=backends.DEFAULT)
    p.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="only jobs with this tag")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("hdfs", help="copy local input to HDFS, for jobs on YARN")
    p.add_argument("action", choices=("put",))
    p.add_argument("source", metavar="LOCAL", help="a file, or a directory whose files are copied with their layout")
    p.add_argument("hdfs_dir", help="hdfs:///dir (the NameNode of $HADOOP_CONF_DIR) or webhdfs://host:port/dir")
    p.set_defaults(func=cmd_hdfs)

    p = sub.add_parser("k8s", help="kubernetes: print the objects a submit creates, as YAML (no cluster needed)")
    p.add_argument("action", choices=("manifests",))
    p.add_argument("spec")
    p.set_defaults(func=cmd_k8s)

    p = sub.add_parser("validate", help="check a job spec without submitting it")
    p.add_argument("spec")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("schema", help="print the job spec's JSON Schema")
    p.set_defaults(func=cmd_schema)
    return parser


# --- commands -------------------------------------------------------------------------


def cmd_submit(client: PrimusClient, args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    if args.backend and args.backend != spec.backend.type:
        try:
            section = backends.default_settings(args.backend)
        except ValidationError as exc:  # a backend with required settings (Kubernetes' image)
            raise SpecError([f"--backend {args.backend}: backend.{problem}; put a backend section with it in the spec"
                             for problem in format_validation_error(exc)]) from None
        spec = spec.model_copy(update={"backend": section})
    app_id = client.submit(spec, on_warning=_warn)
    print(app_id, flush=True)
    if not args.wait:
        return EXIT_OK
    try:
        status = client.wait(app_id, on_status=_Progress(sys.stderr))
    except KeyboardInterrupt:
        print(f"\nstopped watching; the job goes on. `primus kill {app_id}` stops it.", file=sys.stderr)
        return 130
    job = status.job
    for line in failure_lines(client, app_id, status):
        print(line, file=sys.stderr)
    print(f"{app_id}: {job.state}: {job.reason}", file=sys.stderr)  # last: what scripts read
    return _OUTCOME_EXIT.get(job.state, EXIT_FAILED)


def failure_lines(client: PrimusClient, app_id: str, status: StatusSummary) -> list[str]:
    """For a job that failed (or was lost), what its failed executors wrote last to stderr: a heading
    naming each (its attempt, exit code and reason) and the tail of its stderr, indented under it; for a
    lost job, whose AM ended without saying why, the tail of the AM's log as well."""
    state = status.job.state
    if state not in (JobState.FAILED, JobState.LOST):
        return []
    blocks = client.failed_executor_tails(app_id, status, FAILED_TAIL_LINES, FAILED_TAIL_EXECUTORS)
    am_tail = client.am_log_tail(app_id, FAILED_TAIL_LINES) if state == JobState.LOST else None
    if am_tail is not None:
        every_line = client.cluster_for(app_id).cli_command("logs", app_id)
        blocks.append(f"The AM's log, last lines (all: {every_line}):\n{am_tail}")
    lines = []
    for block in blocks:
        heading, *tail = block.split("\n")
        lines += ["  " + heading, *("    " + line for line in tail)]
    return lines


class _Progress:
    """Prints the job's events and a line per change of role progress."""

    def __init__(self, out: Any):
        self.out = out
        self.seen_events = 0
        self.last_line = ""

    def __call__(self, status: StatusSummary) -> None:
        for event in status.events:
            if event.seq > self.seen_events:
                self.seen_events = event.seq
                print(f"{_clock(event.time)} {event_line(event)}", file=self.out)
        job = status.job
        state = f"stopping ({job.stopping})" if job.stopping else job.state
        line = f"{state} | {progress_line(status)}"
        if line != self.last_line:
            self.last_line = line
            print(f"{_clock(time.time())} == {line}", file=self.out, flush=True)


def event_line(event: EventView) -> str:
    """``worker-0: registered -> running trainer started``; an event within one state (a trainer became
    ready, a role scaled) names that state once: ``ps-0 (running): ready: port 41185 accepts connections``."""
    if event.from_state == event.to_state:
        return f"{event.subject} ({event.to_state}): {event.reason}"
    code = f" (exit {event.exit_code})" if event.exit_code is not None else ""
    return f"{event.subject}: {event.from_state or '-'} -> {event.to_state}{code} {event.reason}"


def am_attempt_line(attempt: AMAttempt) -> str:
    """One AM restart: when and why, how long the job went without an AM, what it kept."""
    line = f"AM attempt {attempt.attempt} started {_clock(attempt.started_at)}"
    if attempt.cause:
        line += f" ({attempt.cause})"
    if attempt.recovered_at is None:
        return line + f", adopting {attempt.adopted} executor(s)..."
    took = attempt.recovered_at - (attempt.down_since or attempt.started_at)
    return line + (f", recovered in {took:.2f}s: {attempt.adopted} executor(s) adopted, "
                   f"{attempt.gone} gone while no AM ran (started again)")


def goodput_line(goodput: Goodput) -> str:
    """``goodput: ETTR 0.97 (productive 1,164 s, restarting 22 s, ...)``: where the executors' time went."""
    ratio = "n/a" if goodput.ratio is None else f"{goodput.ratio:.2f}"
    causes = ", ".join(f"{cause} {seconds:,.0f} s" for cause, seconds in goodput.seconds.items())
    return f"goodput: ETTR {ratio} ({causes})"


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def autoscale_line(policy: AutoscaleView) -> str:
    """``autoscale 1..4 on target_queued 1Gi; last 10:02:03: backlog ...: 2 -> 4`` from a role's status."""
    targets = ((name, getattr(policy, name)) for name in AUTOSCALE_TARGETS)  # the one the spec gives
    target = next((f"{name} {value}" for name, value in targets if value is not None), "")
    last = policy.last_decision
    return (f"autoscale {policy.min_replicas}..{policy.max_replicas} on {target}; "
            + (f"last {_clock(last.time)}: {last.reason}" if last else "no change yet"))


def cmd_status(client: PrimusClient, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(client.status(args.app_id).model_dump(mode="json"), indent=2))
        return EXIT_OK
    status = client.status(args.app_id, summary=True)
    job = status.job
    print(f"{job.app_id}  {job.name}  {job.state}  {job.reason}")
    for role in status.roles:
        print("  " + role_progress(role) + (f"  failures {role.failures}" if role.failures else ""))
        if role.autoscale is not None:
            print("    " + autoscale_line(role.autoscale))
    if status.data is not None:
        print("  " + data_progress(status.data))
        if status.data.kafka is not None:
            print("  " + kafka_progress(status.data.kafka))
    if status.goodput is not None:
        print("  " + goodput_line(status.goodput))
    for attempt in job.am_attempts:
        print("  " + am_attempt_line(attempt))
    for line in executor_lines(client, args.app_id, status, every=args.executors):
        print(line)
    for line in failure_lines(client, args.app_id, status):
        print(line)
    link = client.page_link(args.app_id) if job.state not in JOB_FINISHED else None
    if link is not None:
        print(f"  page: {link}  (one-time sign-in link)")
    elif job.state in JOB_FINISHED and not client.has_history(args.app_id):
        print("  page: none: its AM saved no status to show")  # `primus ui` would say just that
    else:
        print(f"  page: primus ui {args.app_id}  ({'its history' if job.state in JOB_FINISHED else 'once its AM runs'})")
    return EXIT_OK


def executor_lines(client: PrimusClient, app_id: str, summary: StatusSummary, every: bool) -> list[str]:
    """A line per executor when ``every`` is asked for or the job has few; else one per executor not
    running, the first ``EXECUTORS_LISTED`` of them, and a line counting the rest and saying how to list all."""
    total = sum(sum(role.states.values()) for role in summary.roles)
    if every or total <= EXECUTORS_LISTED:
        return [executor_line(ex) for ex in client.executors(app_id).executors]
    page = client.executors(app_id, state=NOT_RUNNING, limit=EXECUTORS_LISTED)
    lines = [executor_line(ex) for ex in page.executors]
    listed = f"the first {len(lines):,} of {page.total:,}" if page.total > len(lines) else f"{page.total:,}"
    every_one = client.cluster_for(app_id).cli_command("status", app_id, "--executors")
    lines.append(f"    {total:,} executors: {listed} not running listed, {total - page.total:,} running not listed; "
                 f"every one: {every_one}")
    return lines


def executor_line(ex: ExecutorView) -> str:
    ports = ",".join(map(str, ex.ports))
    code = ex.exit_code if ex.exit_code is not None else "-"
    restarts = ex.restarts if ex.restarts is not None else 0  # a current executor's (earlier ones have none)
    return (f"    {ex.id:<14} {ex.state:<10} {ex.host or '-':<15} ports {ports or '-':<12} "
            f"restarts {restarts}  exit {code}  {ex.reason}")


def cmd_ui(client: PrimusClient, args: argparse.Namespace) -> int:
    link = client.page_link(args.app_id)
    if link is not None:
        print(f"{args.app_id} is running; its page (a one-time sign-in link, valid 5 minutes):\n{link}")
        return EXIT_OK
    import asyncio

    from .ui.history import NoHistory, archive_view, start_history_server

    try:
        view = archive_view(client, args.app_id)
    except NoHistory as exc:
        print(f"primus: {exc}", file=sys.stderr)
        return EXIT_FAILED

    async def serve() -> None:
        runner, link = await start_history_server(view, args.host, args.port, client.user or "anonymous")
        print(f"{args.app_id} ended {read_status(view.status(), summary=True).job.state}; its page as it ended (one-time sign-in "
              f"link; Ctrl-C stops the server):\n{link}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    asyncio.run(serve())
    return EXIT_OK


def cmd_history(client: PrimusClient, args: argparse.Namespace) -> int:
    jobs = [job for job in client.list(backend=args.backend) if job.state in JOB_FINISHED]
    if args.json:
        print(json.dumps([job.model_dump(mode="json") for job in jobs], indent=2))
        return EXIT_OK
    for job in jobs:
        ended = _clock(job.finished_at) if job.finished_at else "-"
        print(f"{job.app_id}  {job.state:<10} ended {ended}  {job.name}  {job.reason}")
    return EXIT_OK


def cmd_logs(client: PrimusClient, args: argparse.Namespace) -> int:
    if args.role is None and args.attempt is not None:  # a part of the AM's log: it grows no more
        if args.follow:
            print("primus: logs --attempt without --role is an AM attempt's log, which is not followed: "
                  "drop --follow, or --attempt for the AM's log as it grows", file=sys.stderr)
            return EXIT_USAGE
        sys.stdout.buffer.write(client.am_attempt_log(args.app_id, args.attempt))
        return EXIT_OK
    path = client.log_path(args.app_id, args.role, args.index if args.role else None, args.stream,
                           wait=60.0 if args.follow else 0.0, attempt=args.attempt)
    for chunk in client.follow_log(args.app_id, path, follow=args.follow):
        sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
    return EXIT_OK


def cmd_kill(client: PrimusClient, args: argparse.Namespace) -> int:
    before = client.status(args.app_id, summary=True).job.state
    status = client.kill(args.app_id, reason=args.reason)  # still: an AM that lingers too long is ended
    job = status.job
    if before in JOB_OUTCOMES:  # not this kill's doing
        print(f"{args.app_id} had already ended ({job.state}: {job.reason}): nothing to kill")
    else:
        print(f"{args.app_id}: {job.state}: {job.reason}")
    return EXIT_OK if job.state in JOB_OUTCOMES else EXIT_FAILED


def cmd_scale(client: PrimusClient, args: argparse.Namespace) -> int:
    reply = client.scale(args.app_id, args.role, args.replicas)
    print(f"{args.app_id}: role {reply.role} now has {reply.replicas} replicas")
    return EXIT_OK


def cmd_data(client: PrimusClient, args: argparse.Namespace) -> int:
    data: DataStatus | None
    if args.action == "savepoint":
        if not args.dir:
            print("primus: data savepoint needs a directory: primus data savepoint APP DIR", file=sys.stderr)
            return EXIT_USAGE
        saved = client.data_savepoint(args.app_id, args.dir)
        print(f"{args.app_id}: {saved.tasks} task positions ({saved.done} done) saved to {saved.dir}; "
              f"start a job with input.restore_from: {saved.dir} to resume from them")
        return EXIT_OK
    if args.action == "suspend":
        data = client.data_suspend(args.app_id)
    elif args.action == "resume":
        data = client.data_resume(args.app_id)
    else:
        data = client.data(args.app_id)
        if data is None:
            print(f"primus: job {args.app_id} has no input", file=sys.stderr)
            return EXIT_USAGE
    if args.json:
        print(json.dumps(data.model_dump(mode="json"), indent=2))
    else:
        print(f"{args.app_id}: {data_progress(data)}")
        if data.kafka is not None:
            print(f"{args.app_id}: {kafka_progress(data.kafka)}")
    return EXIT_OK


def cmd_list(client: PrimusClient, args: argparse.Namespace) -> int:
    tags = {}
    for item in args.tag:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"primus: --tag must be KEY=VALUE, got {item!r}", file=sys.stderr)
            return EXIT_USAGE
        tags[key] = value
    jobs = client.list(tags or None, backend=args.backend)
    if args.json:
        print(json.dumps([job.model_dump(mode="json") for job in jobs], indent=2))
    for job in [] if args.json else jobs:
        print(f"{job.app_id}  {job.state:<10} {job.name}")
    return EXIT_OK


def cmd_hdfs(client: PrimusClient, args: argparse.Namespace) -> int:
    if not is_hdfs(args.hdfs_dir):
        print(f"primus: hdfs put: the target must be hdfs:///dir or webhdfs://host:port/dir, got {args.hdfs_dir!r}",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        # A Kerberized cluster: SPNEGO from $PRIMUS_KERBEROS_PRINCIPAL/$PRIMUS_KERBEROS_KEYTAB (the
        # YARN client's login; None without them).
        hadoop.use_login(getattr(client.cluster("yarn"), "login", None))
        written = hadoop.put(Path(args.source), args.hdfs_dir)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"primus: hdfs put: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for path in written:
        print(path)
    print(f"{len(written)} files copied under {args.hdfs_dir}: name it in input.sources[].path "
          f"(e.g. {args.hdfs_dir.rstrip('/')}/{{{{YYYY}}}}{{{{MM}}}}{{{{DD}}}}/)", file=sys.stderr)
    return EXIT_OK


def _warn(warning: str) -> None:
    """A spec's probable mistake (``preflight``), from validate and submit: on stderr, the job goes on."""
    print(f"primus: warning: {warning}", file=sys.stderr)


def cmd_validate(client: PrimusClient, args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    found = preflight.check(spec)  # what submit would refuse or warn about on this machine
    if found.problems:
        raise SpecError(found.problems)
    for warning in found.warnings:
        _warn(warning)
    print(f"{args.spec}: valid ({len(spec.roles)} roles: "
          + ", ".join(f"{r.name} x{r.replicas}" for r in spec.roles) + ")")
    return EXIT_OK


def cmd_k8s(client: PrimusClient, args: argparse.Namespace) -> int:
    import yaml

    from .backends.kubernetes.client import submit_manifests

    print(yaml.safe_dump_all(submit_manifests(load_spec(args.spec)), sort_keys=False), end="")
    return EXIT_OK


def cmd_schema(client: PrimusClient, args: argparse.Namespace) -> int:
    print(json.dumps(JobSpec.json_schema(), indent=2))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
