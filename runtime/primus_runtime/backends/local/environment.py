"""What of the submitting environment reaches a local job's executors, and so its trainers.

A local job's AM runs with the environment of whoever submitted it: an Airflow worker's, with
``AIRFLOW__*`` settings (the Fernet key, the database URL), ``AIRFLOW_CTX_*``, its connections and
secrets passed as variables, cloud credentials. The AM keeps all of it (its own reads of the input,
HDFS or Kerberos settings may need them). Its executors, and the trainers they start, get only

- ``BASE_ENV``: what a program needs to run on this machine as this user, not who submitted it
  nor with what credentials (and the executor's HDFS user);
- the backend section's ``inherit_env`` (names, or prefixes ending in ``*``): what the job asks for
  by name, e.g. ``TF_PYTHON`` or ``AWS_*`` for a trainer that reads S3 itself;
- the executor's own ``PRIMUS_*`` settings, which it drops before it starts the trainer.

The trainer's environment is then composed by the executor, the same on every backend
(``executor/main.py``: ``trainer_environment``): this base, the role's ``env``, ``PRIMUS_*`` and the
framework's variables (``am/trainer_env.py``). YARN and Kubernetes executors start in their
container's environment (the NodeManager's or the image's, plus what the backend sets from the
spec), never the submitter's, so nothing is filtered there.

``PYTHONPATH`` is deliberately not in the base: the submitter's is the submitting program's (the
client even puts the runtime's own directory on it for the AM), while a trainer's code comes with
its ``files``, its interpreter's packages and ``primus_runtime`` from the job bundle (the executor
puts the bundle on ``PYTHONPATH``). A role that needs more sets it in its ``env``, or the job
inherits it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# Names, or prefixes ending in "*". PATH: `python3` and `bash` resolve as they did for the
# submitter (the venv's interpreter when its bin is on PATH, and VIRTUAL_ENV to match it);
# LD_LIBRARY_PATH: the libraries those programs load; HOME, USER, LOGNAME: who runs them and
# where their dotfiles are; LANG, LANGUAGE, LC_*, TZ: how text and times read; TMPDIR: where
# temporary files go; SSL_CERT_FILE, SSL_CERT_DIR: which certificate authorities HTTPS trusts;
# HADOOP_USER_NAME: whom the executor's own WebHDFS reads of the input act as, the AM's user
# (``hadoop.hadoop_user``; a name under simple authentication, no credential; Kubernetes executor
# pods get it as well).
BASE_ENV = ("PATH", "LD_LIBRARY_PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR",
            "VIRTUAL_ENV", "SSL_CERT_FILE", "SSL_CERT_DIR", "HADOOP_USER_NAME")


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` is one of ``patterns`` (a name, or a prefix ending in ``*``)."""
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def executor_base_env(environ: Mapping[str, str], inherit: Iterable[str] = ()) -> dict[str, str]:
    """The variables of ``environ`` (the AM's: the submitter's) that a local executor starts with,
    and its trainer gets: ``BASE_ENV`` and the job's ``inherit_env``."""
    patterns = (*BASE_ENV, *inherit)
    return {name: value for name, value in environ.items() if matches(name, patterns)}
