"""The ``backend`` section of a job on YARN."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from ...spec_types import SIZE_RULE, BackendSettings, ByteSize

_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@-]{0,255}")


def _user_name(value: str) -> str:
    # YARN reads an ACL as "user1,user2 group1": a comma or a space would grant more than named.
    if value != "*" and not _USER.fullmatch(value):
        raise ValueError("must be a user name (letters, digits, '.', '_', '-', '@'; at most 256) or '*' (everyone)")
    return value


UserName = Annotated[str, AfterValidator(_user_name)]


class YarnBackend(BackendSettings):
    """A YARN application started through skein: the AM runs in the application's master
    container and asks YARN for one container per executor.

    The cluster is the one of ``$HADOOP_CONF_DIR`` where the job is submitted. Nodes need only a
    Python 3.9+ for executors; the AM's interpreter (``python``) needs the runtime's dependencies
    (pydantic, aiohttp, prometheus-client, skein, fsspec, requests; gssapi with a ``keytab``).
    """

    type: Literal["yarn"]
    queue: str = Field("default", description="YARN queue of the application.")
    node_label: str | None = Field(None, description="Node label expression for the AM and executor containers.")
    application_tags: dict[str, str] = Field(
        default_factory=dict, description="Extra YARN application tags (``key:value``), besides the job's tags.")
    user: str | None = Field(None, description="Submit as this user (the submitter must be allowed to proxy).")
    python: str | None = Field(
        None, description="Interpreter on the nodes for the AM and executors; default the path of the "
        "submitting interpreter (right when nodes share its installation, as on the minicluster).")
    am_memory: ByteSize = Field("1Gi", validate_default=True,
                                description="Memory of the AM container, e.g. '2Gi'. " + SIZE_RULE)
    am_vcores: int = Field(1, ge=1, description="Virtual cores of the AM container.")
    principal: str | None = Field(
        None, description="Kerberos principal to submit and act as (a Kerberized cluster), with ``keytab``: "
        "skein logs in with it, and every REST call (ResourceManager, NodeManagers, WebHDFS) authenticates "
        "with SPNEGO from the keytab (a private credential cache: the user's is left alone). The AM gets "
        "the keytab too (its container only); executors never do.")
    keytab: str | None = Field(None, description="Keytab of ``principal`` on the submitting machine.")
    view_acls: list[UserName] = Field(
        default_factory=list, description="Users besides the submitter who may see the application in YARN (its "
        "page, its containers' logs); '*' is everyone. YARN enforces the application's ACLs: nobody else may.")
    modify_acls: list[UserName] = Field(
        default_factory=list, description="Users besides the submitter who may kill the application through YARN; "
        "'*' is everyone.")
