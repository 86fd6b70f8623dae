"""``am.tls``: the AM serves HTTPS with a certificate from the job's own CA; executors and clients
trust only that CA, and its key never leaves the AM's side."""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import subprocess
import sys

import pytest
from cryptography import x509

from conftest import make_spec, wait_for
from primus_runtime import protocol
from primus_runtime.api_client import AMClient, AMUnavailable, AMUntrusted
from primus_runtime.backends.local.jobs import processes_of_job
from primus_runtime.spec import JobSpec, SpecError
from primus_runtime.tls import new_ca, server_certificate

# --- certificates ------------------------------------------------------------------------------


def test_the_ca_is_a_ca_named_after_the_job_and_valid_now():
    ca = x509.load_pem_x509_certificate(new_ca("clicks").cert)
    now = datetime.datetime.now(datetime.timezone.utc)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert "clicks" in ca.subject.rfc4514_string()
    assert ca.not_valid_before_utc < now < ca.not_valid_after_utc
    assert ca.not_valid_after_utc - now > datetime.timedelta(days=365)


@pytest.mark.parametrize("host,kind,expected", [
    ("127.0.0.1", x509.IPAddress, ipaddress.ip_address("127.0.0.1")),
    ("::1", x509.IPAddress, ipaddress.ip_address("::1")),
    ("node-7.cluster.example", x509.DNSName, "node-7.cluster.example"),
])
def test_the_am_certificate_names_its_host_and_is_signed_by_the_ca(host, kind, expected):
    ca = new_ca("job")
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    cert = x509.load_pem_x509_certificate(server_certificate(ca, host).cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(kind) == [expected]
    assert len(list(sans)) == 1
    cert.verify_directly_issued_by(ca_cert)
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    now = datetime.datetime.now(datetime.timezone.utc)
    assert cert.not_valid_before_utc < now < cert.not_valid_after_utc <= ca_cert.not_valid_after_utc


def test_another_jobs_ca_does_not_verify_the_am_certificate():
    ours, theirs = new_ca("ours"), new_ca("theirs")
    cert = x509.load_pem_x509_certificate(server_certificate(ours, "127.0.0.1").cert)
    with pytest.raises(ValueError):
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(theirs.cert))


# --- the spec ----------------------------------------------------------------------------------


def test_tls_is_off_by_default_and_refused_on_backends_without_it():
    roles = [{"name": "worker", "command": "true"}]
    assert JobSpec.from_dict(make_spec(roles)).am.tls is False
    assert JobSpec.from_dict(make_spec(roles, am={"tls": True})).am.tls is True
    with pytest.raises(SpecError) as refused:
        JobSpec.from_dict(make_spec(roles, am={"tls": True}, backend={"type": "kubernetes"}))
    assert "am.tls: the kubernetes backend cannot serve the AM API over TLS yet (only local, yarn), got true" in str(refused.value)


# --- a real job --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_job(tmp_path_factory):
    """A TLS job whose worker runs until the test creates its ``go`` file, then succeeds."""
    from primus_runtime.client import PrimusClient

    tmp = tmp_path_factory.mktemp("tls")
    client = PrimusClient(tmp / "home")
    go = tmp / "go"
    command = f"sh -c 'while [ ! -e {go} ]; do sleep 0.1; done'"
    app = client.submit(make_spec([{"name": "worker", "replicas": 1, "command": command}], am={"tls": True}))
    wait_for(lambda: client.status(app).job.state == "running", 60, "the TLS job running")
    yield client, app, go
    if processes_of_job(app):
        client.cluster("local").force_kill(app)


def _primus(home, *args):
    proc = subprocess.run([sys.executable, "-m", "primus_runtime.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def test_status_over_tls_and_the_page_link_is_https(tls_job):
    client, app, _ = tls_job
    code, out, err = _primus(client.cluster("local").home, "status", app)
    assert code == 0, err
    assert "running" in out.splitlines()[0]
    address, _ = client.cluster("local").am_endpoint(app)
    link = client.page_link(app)
    assert link is not None and link.startswith(f"https://{address}/ui/login?ticket=")


def test_plain_http_to_the_tls_am_fails(tls_job):
    client, app, _ = tls_job
    address, token = client.cluster("local").am_endpoint(app)
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    with pytest.raises((http.client.HTTPException, OSError)):
        conn.request("GET", protocol.API_PREFIX + "/status", headers={"Authorization": f"Bearer {token}"})
        conn.getresponse()
    conn.close()
    with pytest.raises(AMUnavailable):
        AMClient(address, token).get(protocol.API_PREFIX + "/status", timeout=10)


def test_a_client_trusting_another_ca_or_host_refuses_with_a_tls_message(tls_job, tmp_path):
    client, app, _ = tls_job
    address, token = client.cluster("local").am_endpoint(app)
    other_ca = tmp_path / "other-ca.crt"
    other_ca.write_bytes(new_ca("other").cert)
    with pytest.raises(AMUntrusted, match=r"^TLS: the certificate of the AM at .* does not verify against"):
        AMClient(address, token, str(other_ca)).get(protocol.API_PREFIX + "/status", timeout=10)
    # The right CA, but a name the certificate does not carry (it names 127.0.0.1): host names are checked.
    port = address.rsplit(":", 1)[1]
    with pytest.raises(AMUntrusted, match="localhost"):
        AMClient(f"localhost:{port}", token, client.cluster("local").am_ca_file(app)).get(protocol.API_PREFIX + "/status", 10)

    job = client.cluster("local").job(app)
    original = job.ca_cert.read_bytes()
    job.ca_cert.write_bytes(other_ca.read_bytes())
    try:
        code, out, err = _primus(client.cluster("local").home, "status", app)
    finally:
        job.ca_cert.write_bytes(original)
    assert code == 5 and out == ""
    assert err.startswith(f"primus: TLS: the certificate of the AM at {address} does not verify against the job's CA")
    assert "Traceback" not in err


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [entry.decode(errors="replace").partition("=") for entry in f.read().split(b"\0") if entry]
    return {name: value for name, _, value in pairs}


def test_the_ca_key_stays_with_the_am(tls_job):
    """No process of the job but the AM's reads the CA key: none has it, or its path, in its environment
    (AM, fork server, executor, trainer; the executors got the CA certificate, or they could not have
    registered with the AM), and the trainer's directory holds no key."""
    client, app, _ = tls_job
    job = client.cluster("local").job(app)
    environments = [_environ(pid) for pid in processes_of_job(app)]
    assert len(environments) >= 3, "the AM, the fork server and the trainer of the job"
    for env in environments:
        assert not any(str(job.ca_key) in value or "PRIVATE KEY" in value for value in env.values())
    ca_file = job.ca_cert.read_text()
    assert "CERTIFICATE" in ca_file and "PRIVATE KEY" not in ca_file
    assert job.ca_key.stat().st_mode & 0o077 == 0 and job.ca_cert.stat().st_mode & 0o077 == 0
    work = job.work_dir("worker", 0)
    assert not any("PRIVATE KEY" in p.read_text(errors="replace") for p in work.rglob("*") if p.is_file())


def test_the_tls_job_runs_to_success(tls_job):
    client, app, go = tls_job
    go.touch()
    status = client.wait(app, timeout=60)
    assert status.job.state == "succeeded", status.job
    assert "AM API at https://" in open(client.cluster("local").am_log(app)).read()
