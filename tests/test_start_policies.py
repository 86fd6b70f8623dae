"""Start policies observed on real executor processes (local backend)."""

from __future__ import annotations

from conftest import make_spec, wait_for

LONG = "sleep 60"


def test_ordered_start_launches_workers_after_every_ps_runs(client):
    # Readiness `spawned`: a ps counts as ready once its trainer runs (it never listens here).
    spec = make_spec([
        {"name": "ps", "replicas": 2, "command": LONG, "readiness": {"probe": "spawned"}},
        {"name": "worker", "replicas": 2, "command": "sleep 0.5"},
    ], scheduling={"policy": "ordered"})
    app = client.submit(spec)
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    ex = {e.id: e for e in client.status(app).executors}
    last_ps_running = max(ex[f"ps-{i}"].running_at for i in range(2))
    first_worker_registered = min(ex[f"worker-{i}"].registered_at for i in range(2))
    assert first_worker_registered > last_ps_running
    # The ps are not waited on: the AM stopped them once the workers succeeded, which is no failure.
    assert {ex["ps-0"].state, ex["ps-1"].state} == {"stopped"}
    assert {ex["ps-0"].reason, ex["ps-1"].reason} == {"job succeeded"}


def test_ordered_start_follows_the_order_given(client):
    spec = make_spec([
        {"name": "worker", "replicas": 1, "command": "sleep 0.5"},
        {"name": "chief", "replicas": 1, "ports": 0, "command": LONG, "success_percent": 0},  # ready: spawned
    ], scheduling={"policy": "ordered", "order": ["chief", "worker"]})
    app = client.submit(spec)
    assert client.wait(app, timeout=60).job.state == "succeeded"
    ex = {e.id: e for e in client.status(app).executors}
    assert ex["worker-0"].registered_at > ex["chief-0"].running_at


def test_gang_barrier_holds_every_trainer_until_all_registered(client):
    # The ledger fits 3 executors at a time: the 4th cannot register until one ends,
    # so under gang scheduling nobody may start and the barrier times out.
    spec = make_spec([{"name": "worker", "replicas": 4, "command": "sleep 0.2"}],
                     scheduling={"policy": "gang", "start_timeout": "3s"},
                     backend={"type": "local", "cpus": 3})
    app = client.submit(spec)
    status = client.wait(app, timeout=60)
    assert status.job.state == "failed"
    assert "start barrier of role worker timed out after 3s (gang scheduling): 3 of 4" in status.job.reason
    assert all(e.running_at is None for e in status.executors), "a trainer started before the gang was complete"


def test_gang_start_releases_all_trainers_after_the_last_registration(client):
    spec = make_spec([
        {"name": "ps", "replicas": 1, "command": LONG},
        {"name": "worker", "replicas": 3, "command": "sleep 0.3"},
    ], scheduling={"policy": "gang"})
    app = client.submit(spec)
    assert client.wait(app, timeout=60).job.state == "succeeded"
    executors = client.status(app).executors
    last_registered = max(e.registered_at for e in executors)
    assert all(e.running_at >= last_registered for e in executors)


def test_dynamic_start_begins_once_min_replicas_registered(client):
    # Only 2 of 3 workers fit at once. Dynamic scheduling with min_replicas 2 starts
    # the first two; the third launches when one of them ends, and the job succeeds.
    spec = make_spec([{"name": "worker", "replicas": 3, "min_replicas": 2, "command": "sleep 1"}],
                     scheduling={"policy": "dynamic"}, backend={"type": "local", "cpus": 2})
    app = client.submit(spec)
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    ex = sorted(status.executors, key=lambda e: e.registered_at)
    assert ex[0].running_at < ex[2].registered_at, "the first trainers waited for the third executor"


def test_job_state_moves_to_running_once_every_executor_runs(client):
    app = client.submit(make_spec([{"name": "worker", "replicas": 2, "command": LONG}]))
    wait_for(lambda: client.status(app).job.state == "running", 30, "job running")
    states = [e.to_state for e in client.status(app).events if e.subject == "job"]
    assert states == ["starting", "running"]
    client.kill(app)


def test_dynamic_start_times_out_when_min_replicas_never_fit(client):
    spec = make_spec([{"name": "worker", "replicas": 3, "min_replicas": 3, "command": "sleep 1"}],
                     scheduling={"policy": "dynamic", "start_timeout": "3s"}, backend={"type": "local", "cpus": 2})
    status = client.wait(client.submit(spec), timeout=60)
    assert status.job.state == "failed"
    assert "start barrier of role worker timed out after 3s (dynamic scheduling): 2 of 3" in status.job.reason


def test_a_start_timeout_names_the_short_resource_and_the_job_ends_within_the_grace(client):
    # Memory for 2 of 3 workers: the gang never completes. The one left waiting was never
    # started, so nothing needs the shutdown grace: the job ends soon after the verdict.
    grace = 5.0
    spec = make_spec([{"name": "worker", "replicas": 3, "command": "sleep 0.2", "resources": {"memory": "2Gi"}}],
                     scheduling={"policy": "gang", "start_timeout": "2s"}, am={"shutdown_grace": grace},
                     backend={"type": "local", "memory": "4Gi"})
    status = client.wait(client.submit(spec), timeout=60)
    assert status.job.state == "failed"
    assert status.job.reason == ("start barrier of role worker timed out after 2s (gang scheduling): "
                                 "2 of 3 executors registered; "
                                 "worker-2 waits for memory: needs 2048Mi, 0Mi free of 4096Mi")
    job_events = {e.to_state: e for e in status.events if e.subject == "job"}
    assert job_events["stopping"].reason == "failed: " + status.job.reason
    assert job_events["failed"].time - job_events["stopping"].time < grace
