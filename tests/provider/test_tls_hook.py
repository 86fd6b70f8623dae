"""The async hook (triggers) reaches an ``am.tls`` job's AM over HTTPS, trusting only the job's CA."""

from __future__ import annotations

import asyncio

import pytest

from airflow_provider_primus.hooks.primus import PrimusAsyncHook, PrimusHook
from conftest import make_spec, wait_for
from primus_runtime.api_client import AMUntrusted
from primus_runtime.models import StatusDocument
from primus_runtime.tls import new_ca

SLEEPY = [{"name": "worker", "command": "sleep 300"}]


def astatus(app_id: str) -> StatusDocument:
    async def ask() -> StatusDocument:
        hook = PrimusAsyncHook()
        try:
            return await hook.astatus(app_id)
        finally:
            await hook.aclose()

    return asyncio.run(ask())


def test_the_async_hook_reads_a_tls_job_live_and_refuses_another_ca(primus_home, client):
    app_id = PrimusHook().submit(make_spec(SLEEPY, am={"tls": True}))
    wait_for(lambda: client.status(app_id).job.state == "running", 60, "the TLS job running")
    # Only the AM says "running" (without it the hook would report the job pending or lost).
    assert astatus(app_id).job.state == "running"
    job = client.cluster("local").job(app_id)
    job.ca_cert.write_bytes(new_ca("other").cert)
    with pytest.raises(AMUntrusted, match="^TLS: the certificate of the AM at .* does not verify against the job's CA"):
        astatus(app_id)
