"""The node agent (kubelet stand-in) of the Kubernetes test cluster: pods through a real API server
and controller manager, run as local processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from conftest import wait_for

from .conftest import K8sCluster, pod_log, pod_manifest


def gone(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"


def written_pid(path: Path) -> int:
    """The pid a pod's process wrote (a whole line) to a hostPath file."""
    return int(wait_for(lambda: path.exists() and path.read_text().endswith("\n") and path.read_text(),
                        what=f"a pid in {path}"))


def condition(pod: client.V1Pod, kind: str) -> str | None:
    return next((c.status for c in pod.status.conditions or [] if c.type == kind), None)


def test_node_agent_kubelet_stand_in_runs_a_pod_to_success(k8s_cluster: K8sCluster, run_pod, k8s_core,
                                                          k8s_namespace):
    pod = run_pod("ok", ["python", "-c", "import socket, sys; print(socket.gethostname(), sys.executable)"])

    assert pod.status.phase == "Succeeded"
    assert pod.spec.node_name == k8s_cluster.node
    assert pod.status.host_ip == k8s_cluster.node_ip
    assert pod.status.pod_ip.startswith("10.244.0.") and pod.status.pod_ip != k8s_cluster.node_ip
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    assert condition(pod, "Ready") == "False"
    hostname, python = pod_log(k8s_core, k8s_namespace, "ok").split()
    assert hostname == "ok"  # its own UTS namespace, named after the pod
    assert (Path(python).parent / "primus").exists()  # the node's Python: a venv with the project installed


def test_node_agent_kubelet_stand_in_reports_a_failed_command_with_its_exit_code(run_pod):
    pod = run_pod("fails", ["sh", "-c", "echo about to fail; exit 3"])

    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")


def test_node_agent_kubelet_stand_in_refuses_restart_policies_other_than_never(run_pod):
    pod = run_pod("always", ["true"], restartPolicy="Always")

    assert (pod.status.phase, pod.status.reason) == ("Failed", "UnsupportedRestartPolicy")
    assert "restartPolicy 'Always'" in pod.status.message


def test_node_agent_kubelet_stand_in_provides_env_configmaps_and_secrets(run_pod, k8s_core, k8s_namespace):
    k8s_core.create_namespaced_config_map(k8s_namespace, {"metadata": {"name": "cfg"},
                                                          "data": {"mode": "fast", "job.yaml": "roles: []\n"}})
    k8s_core.create_namespaced_secret(k8s_namespace, {"metadata": {"name": "creds"},
                                                      "stringData": {"token": "s3cr3t"}})
    show = ("import json, os; print(json.dumps({'env': {k: os.environ[k] for k in "
            "('POD', 'NS', 'ROLE', 'IP', 'TOKEN', 'MODE', 'GREETING')}, "
            "'cfg': open('/etc/primus/job.yaml').read(), 'secret': open('/etc/creds/token').read()}))")
    env = [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['role']"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
        {"name": "GREETING", "value": "hello $(POD)"},
    ]
    pod = run_pod("envs", ["python", "-c", show], labels={"role": "worker"},
                  volumes=[{"name": "cfg", "configMap": {"name": "cfg"}},
                           {"name": "creds", "secret": {"secretName": "creds"}}],
                  container={"env": env, "volumeMounts": [{"name": "cfg", "mountPath": "/etc/primus"},
                                                          {"name": "creds", "mountPath": "/etc/creds"}]})

    assert pod.status.phase == "Succeeded", pod_log(k8s_core, k8s_namespace, "envs")
    seen = json.loads(pod_log(k8s_core, k8s_namespace, "envs"))
    assert seen["env"] == {"POD": "envs", "NS": k8s_namespace, "ROLE": "worker", "IP": pod.status.pod_ip,
                           "TOKEN": "s3cr3t", "MODE": "fast", "GREETING": "hello envs"}
    assert seen["cfg"] == "roles: []\n" and seen["secret"] == "s3cr3t"
    assert not Path("/etc/primus/job.yaml").exists()  # mounted in the container's namespace only


def test_node_agent_kubelet_stand_in_waits_for_a_missing_configmap(run_pod, k8s_core, k8s_namespace):
    pod = run_pod("early", ["cat", "/etc/late/key"], until=("Pending",),
                  volumes=[{"name": "late", "configMap": {"name": "late"}}],
                  container={"volumeMounts": [{"name": "late", "mountPath": "/etc/late"}]})
    def waiting() -> client.V1ContainerStateWaiting | None:
        statuses = k8s_core.read_namespaced_pod("early", k8s_namespace).status.container_statuses or []
        state = statuses[0].state.waiting if statuses else None
        return state if state and state.reason == "CreateContainerConfigError" else None

    assert f"ConfigMap {k8s_namespace}/late not found" in wait_for(waiting, what="the config error").message
    assert pod.status.phase == "Pending"

    k8s_core.create_namespaced_config_map(k8s_namespace, {"metadata": {"name": "late"}, "data": {"key": "finally"}})

    wait_for(lambda: k8s_core.read_namespaced_pod("early", k8s_namespace).status.phase == "Succeeded",
             timeout=30, what="the pod to run once its ConfigMap exists")
    assert pod_log(k8s_core, k8s_namespace, "early") == "finally"


def test_node_agent_kubelet_stand_in_mounts_a_working_service_account_token(
        k8s_cluster: K8sCluster, run_pod, k8s_core, k8s_namespace):
    rbac = client.RbacAuthorizationV1Api(k8s_cluster.api_client())
    k8s_core.create_namespaced_service_account(k8s_namespace, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(k8s_namespace, {"metadata": {"name": "pod-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
    rbac.create_namespaced_role_binding(k8s_namespace, {
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": k8s_namespace}]})
    whoami = ("import os; from kubernetes import client, config; config.load_incluster_config(); "
              "ns = open('/var/run/secrets/kubernetes.io/serviceaccount/namespace').read(); "
              "me = client.CoreV1Api().read_namespaced_pod(os.environ['HOSTNAME'], ns); "
              "print(me.metadata.uid, me.spec.service_account_name)")
    pod = run_pod("whoami", ["python", "-c", whoami], serviceAccountName="reader")

    assert pod.status.phase == "Succeeded", pod_log(k8s_core, k8s_namespace, "whoami")
    assert pod_log(k8s_core, k8s_namespace, "whoami").split() == [pod.metadata.uid, "reader"]


def test_node_agent_kubelet_stand_in_sigterms_a_deleted_pod_and_finishes_the_deletion(
        run_pod, k8s_core, k8s_namespace, tmp_path):
    trap = ("import os, signal, sys, time\n"
            "def bye(*_):\n"
            "    open('/out/signal', 'w').write('SIGTERM'); sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, bye)\n"
            "open('/out/pid', 'w').write(f'{os.getpid()}\\n')\n"
            "time.sleep(300)\n")
    run_pod("sleeper", ["python", "-c", trap], until=("Running",), terminationGracePeriodSeconds=30,
            volumes=[{"name": "out", "hostPath": {"path": str(tmp_path)}}],
            container={"volumeMounts": [{"name": "out", "mountPath": "/out"}]})
    pid = written_pid(tmp_path / "pid")

    k8s_core.delete_namespaced_pod("sleeper", k8s_namespace)

    wait_for(lambda: gone(k8s_core, k8s_namespace, "sleeper"), timeout=20, what="the pod's deletion to finish")
    assert (tmp_path / "signal").read_text() == "SIGTERM"
    wait_for(lambda: not alive(pid), timeout=5, what=f"process {pid} to end")


def test_node_agent_kubelet_stand_in_sigkills_after_the_grace_period(run_pod, k8s_core, k8s_namespace):
    ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(300)"
    run_pod("stubborn", ["python", "-c", ignore], until=("Running",), terminationGracePeriodSeconds=1)
    wait_for(lambda: "up" in pod_log(k8s_core, k8s_namespace, "stubborn"), what="the process to start")

    k8s_core.delete_namespaced_pod("stubborn", k8s_namespace)

    wait_for(lambda: gone(k8s_core, k8s_namespace, "stubborn"), timeout=20, what="the pod's deletion to finish")


def test_node_agent_kubelet_stand_in_with_the_controller_manager_collects_owned_pods(
        run_pod, k8s_core, k8s_namespace, tmp_path):
    owner = run_pod("owner", ["sleep", "300"], until=("Running",))
    # $$$$: the node agent expands $$ to $ in commands, as the kubelet does.
    child = pod_manifest("child", ["sh", "-c", f"echo $$$$ > {tmp_path}/pid; exec sleep 300"])
    child["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "owner",
                                             "uid": owner.metadata.uid, "blockOwnerDeletion": True}]
    k8s_core.create_namespaced_pod(k8s_namespace, child)
    pid = written_pid(tmp_path / "pid")

    k8s_core.delete_namespaced_pod("owner", k8s_namespace)

    wait_for(lambda: gone(k8s_core, k8s_namespace, "child"), timeout=30, what="the garbage collector")
    wait_for(lambda: not alive(pid), timeout=5, what=f"the child's process {pid} to end")


def test_node_agent_kubelet_stand_in_serves_pod_logs_through_the_api_server(run_pod, k8s_core, k8s_namespace):
    run_pod("talker", ["sh", "-c", "for i in 1 2 3 4 5; do echo line $i; done; echo oops >&2"])

    assert pod_log(k8s_core, k8s_namespace, "talker") == "line 1\nline 2\nline 3\nline 4\nline 5\noops\n"
    assert pod_log(k8s_core, k8s_namespace, "talker", tail_lines=2) == "line 5\noops\n"
    assert pod_log(k8s_core, k8s_namespace, "talker", limit_bytes=8) == "line 1\nl"
    assert pod_log(k8s_core, k8s_namespace, "talker", container="main", follow=True).endswith("oops\n")


def test_node_agent_kubelet_stand_in_gives_pods_ips_the_service_proxy_reaches(run_pod, k8s_core, k8s_namespace):
    serve = ["sh", "-c", "echo hello from $HOSTNAME > hello.txt; exec python -m http.server 18081"]
    probe = {"httpGet": {"path": "/hello.txt", "port": 18081}, "periodSeconds": 1}
    run_pod("web", serve, until=("Running",), labels={"app": "web"},
            container={"readinessProbe": probe, "ports": [{"containerPort": 18081}]})
    k8s_core.create_namespaced_service(k8s_namespace, {
        "metadata": {"name": "web"},
        "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 18081}]}})
    wait_for(lambda: k8s_core.read_namespaced_pod("web", k8s_namespace).status.container_statuses[0].ready,
             timeout=30, what="the readiness probe")

    def through_service() -> str:
        try:
            return k8s_core.connect_get_namespaced_service_proxy_with_path(
                "web:18081", k8s_namespace, "hello.txt", _preload_content=False).data.decode()
        except ApiException:
            return ""  # the Endpoints controller has not caught up yet

    assert wait_for(through_service, timeout=30, what="the service proxy") == "hello from web\n"
    via_pod = k8s_core.connect_get_namespaced_pod_proxy_with_path("web:18081", k8s_namespace, "hello.txt",
                                                                  _preload_content=False)
    assert via_pod.data.decode() == "hello from web\n"


def test_node_agent_kubelet_stand_in_resolves_pod_names_of_a_headless_service(run_pod, k8s_core, k8s_namespace):
    """No cluster DNS: the node agent writes each pod's /etc/hosts as the kubelet does, plus the FQDNs of the
    other running pods with a subdomain."""
    k8s_core.create_namespaced_service(k8s_namespace, {
        "metadata": {"name": "grp"}, "spec": {"clusterIP": "None", "selector": {"group": "grp"}}})
    first = run_pod("first", ["sleep", "300"], until=("Running",), subdomain="grp", labels={"group": "grp"})
    lookup = (f"import socket; print(socket.getfqdn(), "
              f"socket.gethostbyname('first.grp.{k8s_namespace}.svc.cluster.local'), "
              f"socket.gethostbyname('first.grp.{k8s_namespace}.svc'))")  # as a real pod's search list does
    second = run_pod("second", ["python", "-c", lookup], subdomain="grp", labels={"group": "grp"})

    assert second.status.phase == "Succeeded", pod_log(k8s_core, k8s_namespace, "second")
    fqdn, ip, short_ip = pod_log(k8s_core, k8s_namespace, "second").split()
    assert fqdn == f"second.grp.{k8s_namespace}.svc.cluster.local"
    assert ip == short_ip == first.status.pod_ip


def test_node_agent_kubelet_stand_in_test_hook_evicts_a_pod(run_pod, k8s_core, k8s_namespace, tmp_path):
    run_pod("victim", ["sh", "-c", f"echo $$$$ > {tmp_path}/pid; exec sleep 300"], until=("Running",))
    pid = written_pid(tmp_path / "pid")

    k8s_core.patch_namespaced_pod("victim", k8s_namespace, {"metadata": {"annotations": {
        "primus.test/evict": "The node was low on resource: memory."}}})

    pod = wait_for(lambda: (p := k8s_core.read_namespaced_pod("victim", k8s_namespace)).status.phase == "Failed" and p,
                   timeout=20, what="the eviction")
    assert (pod.status.reason, pod.status.message) == ("Evicted", "The node was low on resource: memory.")
    assert not alive(pid)


def test_node_agent_kubelet_stand_in_refuses_pods_asking_for_gpus_it_has_not(run_pod):
    pod = run_pod("gpu", ["true"], container={"resources": {"limits": {"nvidia.com/gpu": 1}}})

    assert (pod.status.phase, pod.status.reason) == ("Failed", "OutOfnvidia.com/gpu")
