"""What the AM imports on its way to its first executor: only what a start needs, and aiohttp's
client TLS contexts get their CA certificates in a thread (the AM serves; it is no aiohttp client)."""

from __future__ import annotations

import json
import subprocess
import sys

# Imported only by jobs (or requests) that use them: Kafka, file formats, HDFS, TLS, the data plane,
# metrics (at the first scrape).
NOT_AT_START = ("confluent_kafka", "pyarrow", "zstandard", "fsspec", "cryptography", "prometheus_client",
                "primus_runtime.data.plane", "primus_runtime.data.source", "primus_runtime.data.kafka",
                "primus_runtime.am.scrape", "xml.etree.ElementTree")


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                          timeout=120).stdout


def test_the_am_imports_only_what_a_start_needs():
    loaded = json.loads(_run(
        "import json, sys\n"
        "from primus_runtime.backends.local import am\n"
        "from primus_runtime.am import main, master, server\n"
        "print(json.dumps(sorted(sys.modules)))\n"))
    assert [name for name in NOT_AT_START if name in loaded] == []


def test_aiohttp_client_contexts_get_the_systems_ca_certificates_in_a_thread():
    out = json.loads(_run(
        "import json, ssl, threading\n"
        "from primus_runtime.am.main import import_http_stack\n"
        "import_http_stack()\n"
        "from aiohttp import connector\n"
        "at_import = connector._SSL_CONTEXT_VERIFIED.cert_store_stats()['x509_ca']\n"
        "for thread in threading.enumerate():\n"
        "    if thread.name == 'aiohttp-ca-certificates':\n"
        "        thread.join()\n"
        "print(json.dumps({'at_import': at_import,\n"
        "                  'verified': connector._SSL_CONTEXT_VERIFIED.cert_store_stats()['x509_ca'],\n"
        "                  'unverified': connector._SSL_CONTEXT_UNVERIFIED.cert_store_stats()['x509_ca'],\n"
        "                  'system': ssl.create_default_context().cert_store_stats()['x509_ca'],\n"
        "                  'restored': 'set_default_verify_paths' not in vars(ssl.SSLContext)}))\n"))
    assert out["at_import"] == 0 or out["system"] == 0  # not loaded on the AM's way to its first executor
    assert out["verified"] == out["unverified"] == out["system"]  # then as aiohttp made them
    assert out["restored"]


def test_the_ams_collector_thresholds_still_free_cyclic_garbage():
    """tune_collector() makes collections rarer (am/main.py GC_THRESHOLDS), not absent: a reference cycle
    dropped while the AM goes on allocating is freed without anyone calling gc.collect()."""
    out = _run(
        "import gc, weakref\n"
        "from primus_runtime.am.main import GC_THRESHOLDS, tune_collector\n"
        "tune_collector()\n"
        "class Node: pass\n"
        "a, b = Node(), Node()\n"
        "a.other, b.other = b, a\n"
        "gone = weakref.ref(a)\n"
        "del a, b\n"
        "kept = [[] for _ in range(2 * GC_THRESHOLDS[0])]  # live objects: what an AM's requests allocate\n"
        "print(gc.isenabled(), gc.get_threshold() == GC_THRESHOLDS, gone() is None)\n")
    assert out.split() == ["True", "True", "True"]
