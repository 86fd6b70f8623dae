"""Where the Hadoop cluster is: read from the client configuration in ``$HADOOP_CONF_DIR``.

Standard library only (the executor may use it on a node that has only Python). The YARN
backend needs the ResourceManager's web address (REST: application reports, kill, tags); the
data plane needs the NameNode's WebHDFS address to read ``hdfs://`` paths over HTTP.
"""

from __future__ import annotations

import getpass
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CONF_FILES = ("core-site.xml", "hdfs-site.xml", "yarn-site.xml")
#: The NameNode's WebHDFS address, which the YARN backend puts into its containers: where a node
#: has no HADOOP_CONF_DIR, hdfs:// paths are read through it.
ENV_WEBHDFS = "PRIMUS_WEBHDFS"
WEBHDFS_TIMEOUT = 30.0  # seconds: every WebHDFS request (connect, and each read of a response)
#: Seconds an executor's HDFS read waits through an outage (a DataNode restarting, a NameNode failing
#: over) before the task fails (``data/webhdfs.py``), unless the job's ``input.storage_outage_timeout``
#: says otherwise (``protocol.ENV_STORAGE_OUTAGE_TIMEOUT`` in the executor's environment).
WEBHDFS_OUTAGE_SECONDS = 120.0
_VAR = re.compile(r"\$\{([^}]+)\}")


class HadoopConfigError(RuntimeError):
    """No usable Hadoop client configuration (names the key or file that is missing)."""


@lru_cache(maxsize=8)
def _load(conf_dir: str) -> dict[str, str]:
    import xml.etree.ElementTree as ET  # only where a Hadoop configuration is read, not in every AM

    values: dict[str, str] = {}
    for name in CONF_FILES:
        path = Path(conf_dir) / name
        if not path.exists():
            continue
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as exc:
            raise HadoopConfigError(f"{path}: not valid XML: {exc}") from None
        for prop in root.iter("property"):
            key, value = prop.findtext("name"), prop.findtext("value")
            if key and value is not None:
                values[key.strip()] = value.strip()
    return values


class HadoopConf:
    """The merged ``core-site``, ``hdfs-site`` and ``yarn-site`` of one configuration directory."""

    def __init__(self, conf_dir: str | os.PathLike | None = None):
        directory = conf_dir or os.environ.get("HADOOP_CONF_DIR")
        if not directory:
            raise HadoopConfigError("HADOOP_CONF_DIR is not set: the YARN backend and hdfs:// paths need "
                                    "the cluster's client configuration (for the minicluster: "
                                    ". DIR/env.sh after scripts/minicluster.sh start DIR)")
        if not Path(directory).is_dir():
            raise HadoopConfigError(f"HADOOP_CONF_DIR={directory}: no such directory")
        self.dir = str(directory)
        self.values = _load(self.dir)

    def get(self, key: str, default: str | None = None) -> str | None:
        value = self.values.get(key, default)
        for _ in range(10):  # ${other.key} references, as Hadoop's Configuration expands them
            if value is None or "${" not in value:
                break
            value = _VAR.sub(lambda m: self.values.get(m.group(1), os.environ.get(m.group(1), "")), value)
        return value

    def require(self, key: str) -> str:
        value = self.get(key)
        if not value:
            raise HadoopConfigError(f"{key} is not set in {self.dir}/{{{','.join(CONF_FILES)}}}")
        return value

    def default_fs(self) -> str:
        """``hdfs://namenode:port`` (``fs.defaultFS``)."""
        return self.require("fs.defaultFS").rstrip("/")

    def webhdfs(self) -> str:
        """``http://host:port`` of the NameNode's web server (WebHDFS lives under ``/webhdfs/v1``)."""
        address = self.get("dfs.namenode.http-address") or f"{urlsplit(self.default_fs()).hostname}:9870"
        return "http://" + _reachable(address, urlsplit(self.default_fs()).hostname)

    def rm_web(self) -> str:
        """``http://host:port`` of the ResourceManager's web server (its REST API lives under ``/ws/v1``)."""
        address = self.get("yarn.resourcemanager.webapp.address") or \
            f"{self.get('yarn.resourcemanager.hostname', '0.0.0.0')}:8088"
        return "http://" + _reachable(address, self.get("yarn.resourcemanager.hostname"))


def _reachable(address: str, fallback_host: str | None) -> str:
    """``0.0.0.0:port`` means "every interface": connect to the service's host name instead."""
    host, _, port = address.rpartition(":")
    if host in ("0.0.0.0", "", "::"):
        host = fallback_host if fallback_host and fallback_host != "0.0.0.0" else "127.0.0.1"
    return f"{host}:{port}"


ENV_HADOOP_USER = "HADOOP_USER_NAME"


def hadoop_user() -> str:
    """Who we act as on a cluster with simple authentication (``HADOOP_USER_NAME``, else the login)."""
    return os.environ.get(ENV_HADOOP_USER) or getpass.getuser()


def is_hdfs(url: str) -> bool:
    return url.startswith(("hdfs://", "webhdfs://"))


def hdfs_path(url: str) -> str:
    """The absolute path part of an ``hdfs://`` or ``webhdfs://`` URL."""
    path = urlsplit(url).path
    return path if path.startswith("/") else "/" + path


def webhdfs_base(url: str, conf: HadoopConf | None = None) -> str:
    """``http://host:port`` serving WebHDFS for ``url``: a ``webhdfs://`` URL names it; an
    ``hdfs://`` URL is served by the NameNode of the configuration."""
    parts = urlsplit(url)
    if parts.scheme == "webhdfs":
        return f"http://{parts.netloc}"
    if conf is None and not os.environ.get("HADOOP_CONF_DIR") and os.environ.get(ENV_WEBHDFS):
        return os.environ[ENV_WEBHDFS]  # a YARN container of ours on a node without the client config
    return (conf or HadoopConf()).webhdfs()


#: A YARN executor on a Kerberized cluster: the WebHDFS delegation token (``delegation=``) the AM
#: fetched for it, which its HDFS reader (data/webhdfs.py) uses instead of ``user.name=``.
ENV_WEBHDFS_DELEGATION = "PRIMUS_WEBHDFS_DELEGATION"

_default_login: Any = None


def use_login(login: Any) -> None:
    """Make ``login`` (backends/yarn/kerberos.py) the one of every later ``hdfs_filesystem`` that
    names none: the AM's data plane (input listing, data checkpoints) on a Kerberized cluster."""
    global _default_login
    _default_login = login


def hdfs_filesystem(url: str | None = None, conf: HadoopConf | None = None,
                    timeout: float = WEBHDFS_TIMEOUT, login: Any = None):  # noqa: ANN201 - fsspec type
    """An fsspec WebHDFS filesystem for ``url`` (default: the configuration's ``fs.defaultFS``), for
    the AM and clients (executors read with the standard library, see ``data/webhdfs.py``).

    Every request times out after ``timeout`` seconds (connecting, and between bytes of a response):
    fsspec sets none, and a NameNode that does not answer must be an error, not a hang."""
    import functools

    import fsspec

    login = login if login is not None else _default_login
    base = urlsplit(webhdfs_base(url or "hdfs:///", conf))
    # With a Kerberos login (backends/yarn/kerberos.py) requests carry SPNEGO tokens instead of
    # ``user.name=`` (which the NameNode would compare with the authenticated user).
    fs = fsspec.filesystem("webhdfs", host=base.hostname, port=base.port,
                           user=None if login is not None else hadoop_user(), skip_instance_cache=True)
    if login is not None:
        fs.session.auth = login.requests_auth()
    fs.session.request = functools.partial(fs.session.request, timeout=timeout)
    return fs


def put(local: Path, url: str, conf: HadoopConf | None = None) -> list[str]:
    """Copy a local file, or every file under a local directory (keeping its layout), into the HDFS
    directory ``url`` (``hdfs:///dir`` or ``webhdfs://host:port/dir``); the HDFS paths written.

    Files whose name starts with ``_`` (``_SUCCESS`` markers) are copied last, so that a job waiting
    for a partition's marker never reads the partition half copied. (For clients: needs fsspec.)"""
    if not local.exists():
        raise FileNotFoundError(f"{local}: no such file or directory")
    files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
    files.sort(key=lambda p: p.name.startswith("_"))  # stable: markers last, the rest in order
    fs = hdfs_filesystem(url, conf)
    root = hdfs_path(url).rstrip("/")
    written = []
    for path in files:
        target = f"{root}/{path.name if path == local else path.relative_to(local).as_posix()}"
        fs.makedirs(target.rsplit("/", 1)[0] or "/", exist_ok=True)
        fs.put_file(str(path), target)
        written.append(target)
    return written
