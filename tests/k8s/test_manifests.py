"""The Kubernetes objects of a job, as plain dicts: no cluster needed."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from primus_runtime import protocol
from primus_runtime.backends.base import LaunchRequest
from primus_runtime.backends.kubernetes import manifests as m
from primus_runtime.backends.kubernetes.store import fit_status
from primus_runtime.cli import main as cli_main
from primus_runtime.spec import JobSpec, SpecError

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
TAGS = {"dag_id": "nightly_train", "task_id": "train.ps_worker", "run_id": "manual__2026-12-03T10:00:00+00:00",
        "try": "1"}


def job(**backend: object) -> JobSpec:
    return JobSpec.from_dict({
        "name": "ps_worker_with_a_rather_long_name_for_kubernetes",
        "roles": [{"name": "ps", "replicas": 2, "command": "x", "placement": {"anti_affinity": ["ps"]}},
                  {"name": "worker_gpu_role_with_a_name_long_enough_to_need_cutting", "replicas": 3, "command": "x",
                   "resources": {"cpu": 1.5, "memory": "3Gi", "gpu": 2},
                   "placement": {"anti_affinity": ["ps", "worker_gpu_role_with_a_name_long_enough_to_need_cutting"]}}],
        "am": {"shutdown_grace": "20s"},
        "tags": TAGS,
        "backend": {"type": "kubernetes", "image": "registry/primus:1", "namespace": "ml", **backend},
    })


def request(spec: JobSpec, role: str, index: int = 0) -> LaunchRequest:
    return LaunchRequest(role, index, "0123456789ab", 0, spec.role(role).resources,
                         {protocol.ENV_ROLE: role, protocol.ENV_INDEX: str(index), protocol.ENV_AM_ADDRESS: "x:1"})


def test_every_name_is_a_dns_label_of_at_most_63():
    spec = job()
    app = m.app_name(spec.name, "abc123")
    names = [app, *vars(m.Names(app)).values()]
    names += [m.Names(app).executor_pod(r.name, 12345, "0123456789ab") for r in spec.roles]
    names += [m.hostname(r.name, 999) for r in spec.roles]
    for name in names:
        assert DNS_LABEL.match(name) and len(name) <= 63, name
    long_role = spec.roles[1].name
    assert m.hostname(long_role, 1) != m.hostname(long_role, 2)  # cut names stay apart (hash of the whole)


@pytest.mark.parametrize("value", [*TAGS.values(), "x" * 80, "-_.a", "__", "ünïcode tag", ""])
def test_label_values_are_valid(value):
    assert LABEL_VALUE.match(m.label_value(value)) and len(m.label_value(value)) <= 63


def test_submit_objects_come_in_order_with_the_am_last_and_rbac_exactly_what_the_am_needs():
    spec = job()
    objects = m.submit_objects(spec, "primus-x-abc123", "tok", "digest1")
    # The AM is restarted by default (am.max_attempts 3): a Job runs it, and its journal has a ConfigMap.
    assert spec.am_attempts == 3
    assert [o["kind"] for o in objects] == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Secret",
                                            "ConfigMap", "Service", "ConfigMap", "Job"]
    assert all(o["metadata"]["namespace"] == "ml" for o in objects)
    role = objects[1]
    assert {(r["resources"][0], tuple(r["verbs"])) for r in role["rules"]} == {
        ("pods", ("create", "get", "list", "watch", "delete", "patch")), ("pods/log", ("get",)),
        ("services", ("create", "get", "list", "delete")), ("configmaps", ("get", "patch", "update"))}
    assert all(r["apiGroups"] == [""] and len(r["resources"]) == 1 for r in role["rules"])
    assert objects[2]["subjects"] == [{"kind": "ServiceAccount", "name": "primus-x-abc123", "namespace": "ml"}]
    assert JobSpec.model_validate_json(objects[3]["data"]["spec.json"]) == spec
    assert objects[4]["stringData"] == {"token": "tok"}


def test_the_am_pod():
    pod = m.am_pod(job(am_cpu=2, am_memory="1Gi"), "primus-x-abc123", "digest1")
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "primus_runtime.am", "--backend", "kubernetes"]
    fields = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e}
    assert fields == {"POD_IP": "status.podIP", "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    # It listens where the executors started with the job look for it, before importing its stack.
    values = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert values[protocol.ENV_AM_LISTEN] == f"$(POD_IP):{m.DEFAULT_AM_PORT}"
    assert container["resources"] == {"requests": {"cpu": "2000m", "memory": "1024Mi"},
                                      "limits": {"cpu": "2000m", "memory": "1024Mi"}}
    assert {v["name"]: v.get("configMap", v.get("secret", v.get("emptyDir"))) for v in pod["spec"]["volumes"]} == {
        "spec": {"name": "primus-x-abc123-spec"}, "token": {"secretName": "primus-x-abc123-token", "defaultMode": 0o400},
        "work": {}}  # its own status file: on a node shared with other jobs' AMs too
    assert {"name": "work", "mountPath": m.WORK_DIR} in container["volumeMounts"]
    assert pod["spec"]["serviceAccountName"] == "primus-x-abc123" and pod["spec"]["restartPolicy"] == "Never"
    assert pod["metadata"]["annotations"][m.ANNOTATION_RUNTIME] == "digest1"
    assert pod["metadata"]["labels"][m.LABEL_COMPONENT] == "am"


def test_an_executor_pod():
    spec = job(node_selector={"pool": "gpu"}, tolerations=[{"key": "gpu", "operator": "Exists"}],
               scheduler_name="volcano", labels={"team": "ml"}, annotations={"note": "x"})
    role = spec.roles[1].name
    pod = m.executor_pod(spec, "primus-x-abc123", "uid-1", request(spec, role, 2), "10.0.0.5:4000", ["trainer.py"])
    meta, pod_spec = pod["metadata"], pod["spec"]
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "primus-x-abc123", "uid": "uid-1",
                                        "controller": True, "blockOwnerDeletion": True}]
    labels = meta["labels"]
    assert labels[m.LABEL_APP] == "primus-x-abc123" and labels[m.LABEL_COMPONENT] == "executor"
    assert labels[m.LABEL_INDEX] == "2" and labels[m.LABEL_INCARNATION] == "0123456789ab"
    assert labels["team"] == "ml" and labels["tags.primus.io/dag_id"] == "nightly_train"
    assert all(LABEL_VALUE.match(v) and len(v) <= 63 for v in labels.values())
    assert json.loads(meta["annotations"][m.ANNOTATION_TAGS]) == TAGS and meta["annotations"]["note"] == "x"
    container = pod_spec["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "1500m", "memory": "3072Mi"},
                                      "limits": {"cpu": "1500m", "memory": "3072Mi", "nvidia.com/gpu": "2"}}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env[protocol.ENV_AM_ADDRESS] == "10.0.0.5:4000" and env[protocol.ENV_GPUS] == "0,1"
    assert env[protocol.ENV_EXECUTOR_HOST] == f"{pod_spec['hostname']}.primus-x-abc123.ml.svc"
    assert env[protocol.ENV_LOG_TO_CONSOLE] == "1" and env[protocol.ENV_FILES_DIR] == m.FILES_DIR
    assert pod_spec["hostname"] == m.hostname(role, 2) and pod_spec["subdomain"] == "primus-x-abc123"
    assert pod_spec["restartPolicy"] == "Never" and pod_spec["terminationGracePeriodSeconds"] == 25
    assert pod_spec["nodeSelector"] == {"pool": "gpu"} and pod_spec["schedulerName"] == "volcano"
    assert pod_spec["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert pod_spec["automountServiceAccountToken"] is False
    term = pod_spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchExpressions"] == [
        {"key": m.LABEL_ROLE, "operator": "In", "values": sorted(["ps", m.label_value(role)])}]
    files = next(v for v in pod_spec["volumes"] if v["name"] == "files")["configMap"]
    assert files["items"] == [{"key": m.file_key("trainer.py"), "path": "trainer.py"}]


def test_no_anti_affinity_unless_asked():
    spec = JobSpec.from_dict({"name": "j", "roles": [{"name": "w", "command": "x"}],
                              "backend": {"type": "kubernetes", "image": "i"}})
    assert "affinity" not in m.executor_pod(spec, "a", "u", request(spec, "w"), "x:1")["spec"]


def test_gang_scheduling():
    volcano = job(gang="volcano", queue="research")
    objects = m.submit_objects(volcano, "primus-x-abc123", "t", "d")
    group = next(o for o in objects if o["kind"] == "PodGroup")
    assert group["spec"] == {"minMember": 5, "queue": "research"}
    pod = m.executor_pod(volcano, "primus-x-abc123", "u", request(volcano, "ps"), "x:1")
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == group["metadata"]["name"]
    kueue = job(gang="kueue", queue="team-a")
    pod = m.executor_pod(kueue, "primus-x-abc123", "u", request(kueue, "ps"), "x:1")
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert "PodGroup" not in [o["kind"] for o in m.submit_objects(kueue, "a", "t", "d")]


def test_the_headless_service_publishes_the_am_and_every_executor():
    service = m.headless_service(job(), "primus-x-abc123", "uid-1")
    assert service["spec"] == {"clusterIP": "None", "publishNotReadyAddresses": True,
                               "selector": {m.LABEL_APP: "primus-x-abc123"}}
    assert service["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    am = m.am_pod(job(), "primus-x-abc123", "digest1")["spec"]
    assert (am["hostname"], am["subdomain"]) == ("am", "primus-x-abc123")
    assert am["containers"][0]["ports"] == [{"name": "api", "containerPort": m.DEFAULT_AM_PORT}]
    assert m.am_address(job(), "primus-x-abc123") == f"am.primus-x-abc123.ml.svc:{m.DEFAULT_AM_PORT}"


def test_the_first_executors_start_with_the_job_under_the_incarnations_the_am_adopts():
    from primus_runtime.backends.kubernetes.client import first_executor_pods
    from primus_runtime.backends.kubernetes.executors import KubernetesExecutorBackend

    spec = JobSpec.model_validate({**job().to_dict(), "scheduling": {"policy": "ordered", "order": ["worker", "ps"]},
                                   "roles": [{"name": "worker", "replicas": 2, "command": "x"},
                                             {"name": "ps", "replicas": 1, "command": "x"}]})
    pods = first_executor_pods(spec, "primus-x-abc123", "uid-1", {}, {})
    # Ordered: only the first role's executors start with the job; the AM launches the ps later.
    assert [(p["metadata"]["labels"][m.LABEL_ROLE], p["metadata"]["labels"][m.LABEL_INDEX]) for p in pods] == [
        ("worker", "0"), ("worker", "1")]
    env = {e["name"]: e.get("value") for e in pods[1]["spec"]["containers"][0]["env"]}
    assert env[protocol.ENV_AM_ADDRESS] == m.am_address(spec, "primus-x-abc123")
    assert env[protocol.ENV_INCARNATION] == m.first_incarnation("primus-x-abc123", "worker", 1)
    assert pods[1]["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    backend = KubernetesExecutorBackend(None, spec, "primus-x-abc123", "ml", "uid-1")
    assert backend.incarnation_for("worker", 1) == env[protocol.ENV_INCARNATION]
    assert backend.incarnation_for("worker", 1) is None  # a replacement gets a new name
    assert backend.incarnation_for("ps", 0) is None


@pytest.mark.parametrize("backend,field", [
    ({"tolerations": [{"key": "a", "effects": "NoSchedule"}]}, "backend.tolerations"),
    ({"tolerations": [{"operator": "In"}]}, "backend.tolerations"),
    ({"gang": "kueue"}, "queue: gang: kueue"),
    ({"gang": "slurm"}, "backend.gang"),
    ({"namespace": "Bad_NS"}, "backend.namespace"),
    ({"am_memory": 512}, "backend.am_memory"),
])
def test_bad_backend_settings_name_the_field(backend, field):
    with pytest.raises(SpecError) as err:
        job(**backend)
    assert field in str(err.value), str(err.value)


def test_role_names_that_collide_in_dns_are_refused():
    spec = JobSpec.from_dict({"name": "j", "roles": [{"name": "a_b", "command": "x"}, {"name": "a-b", "command": "x"}],
                              "backend": {"type": "kubernetes", "image": "i"}})
    assert "same hostname 'a-b-0'" in m.name_clashes(spec)[0]


def test_app_ids():
    assert m.parse_app_id(m.app_id("ml", "primus-x-abc123")) == ("ml", "primus-x-abc123")
    for bad in ("primus-x", "k8s.ml", "k8s..x", "application_1_2"):
        with pytest.raises(KeyError):
            m.parse_app_id(bad)


def test_cli_prints_the_submit_manifests_as_yaml(tmp_path, capsys):
    (tmp_path / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "j", "roles": [{"name": "w", "command": "python train.py",
                                                            "files": ["train.py"]}],
                                    "backend": {"type": "kubernetes", "image": "i"}}))
    assert cli_main(["k8s", "manifests", str(spec)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Secret", "ConfigMap",
                                         "Service", "ConfigMap", "ConfigMap", "Job"]
    import base64

    assert base64.b64decode(docs[7]["binaryData"][m.file_key("train.py")]) == b"print('hi')\n"
    local = tmp_path / "local.yaml"
    local.write_text(yaml.safe_dump({"name": "j", "roles": [{"name": "w", "command": "x"}]}))
    assert cli_main(["k8s", "manifests", str(local)]) == 2
    assert "backend.type: must be kubernetes" in capsys.readouterr().err


def test_a_status_too_big_for_a_config_map_loses_its_oldest_events():
    events = [{"seq": i, "reason": "x" * 100} for i in range(2000)]
    document = json.dumps({"job": {"state": "running"}, "events": events}).encode()
    fitted = json.loads(fit_status(document, limit=50_000))
    assert len(json.dumps(fitted)) <= 50_000
    kept = fitted["events"]
    assert kept and kept[-1]["seq"] == 1999 and fitted["events_dropped"] == 2000 - len(kept)
    assert kept == events[fitted["events_dropped"]:]
    assert fit_status(document) == document  # small enough: untouched
