"""The job's membership as executors receive it: role -> address by index, encoded once.

Every start command, and every ``cluster`` command after a change, carries the membership. At
10,000 executors it is ~250 KB of JSON: building it as a dict and encoding it again for each
reply made a job's start quadratic. Here each executor's address is kept encoded
(``b'"host:port"'`` or ``b'null'``) and changed in place when that one executor changes, so a
change costs O(1); a role's view (the roles it sees, ``Role.peers``) is joined into bytes at most
once per change of those roles, and every reply of that version shares the same bytes.

Versions: ``JobRecord.cluster_version`` counts every change of the job; a view's version is the
job's version at the last change of one of its roles, so an executor that sees only the ps is not
sent the membership again each time a worker registers.
"""

from __future__ import annotations

import json

from .state import Executor, JobRecord

_NULL = b"null"


class Membership:
    def __init__(self, record: JobRecord, views: dict[str, tuple[str, ...]]):
        """``views``: role -> the roles whose addresses its executors get."""
        self.record = record
        self.views = views
        self._entries: dict[str, list[bytes]] = {}  # role -> encoded address by index
        self._changed_at: dict[str, int] = {}  # role -> job cluster_version of its last change
        self._encoded: dict[tuple[str, ...], tuple[int, bytes]] = {}  # view -> (version, bytes)
        self._versions: dict[str, int] = {}  # role -> the version of its view (asked at every heartbeat)
        self.rebuild()

    def rebuild(self) -> None:
        """Everything from the record again (at start, and after an AM restart restored it)."""
        self._encoded.clear()
        for name, role in self.record.roles.items():
            self._entries[name] = [_NULL] * role.replicas
            self._changed_at[name] = self.record.cluster_version
        for ex in self.record.executors.values():
            self._put(ex)
        self._versions = dict.fromkeys(self.views, self.record.cluster_version)

    def changed(self, ex: Executor) -> None:
        """``ex`` registered or ended: its index's address is the current incarnation's now."""
        current = self.record.executors.get(ex.id)
        self._put(current if current is not None else ex, gone=current is None)
        self._bump(ex.role)

    def resized(self, role: str) -> None:
        """``role`` was scaled: indices added (no address yet) or removed."""
        entries = self._entries[role]
        replicas = self.record.roles[role].replicas
        del entries[replicas:]
        entries.extend([_NULL] * (replicas - len(entries)))
        for index in range(replicas):
            current = self.record.executors.get(f"{role}-{index}")
            if current is not None:
                self._put(current)
        self._bump(role)

    def version(self, role: str) -> int:
        """The version of what executors of ``role`` see."""
        return self._versions[role]

    def encoded(self, role: str) -> tuple[int, bytes]:
        """``{"version": v, "roles": {...}}`` of the view of ``role``, as JSON bytes, and ``v``."""
        view = self.views[role]
        version = self.version(role)
        cached = self._encoded.get(view)
        if cached is None or cached[0] != version:
            roles = b",".join(b"%s:[%s]" % (json.dumps(name).encode(), b",".join(self._entries[name]))
                              for name in view)
            cached = (version, b'{"version":%d,"roles":{%s}}' % (version, roles))
            self._encoded[view] = cached
        return cached

    def addresses(self, role: str) -> list[str | None]:
        """The addresses of ``role`` by index (for tests and in-process readers)."""
        return [json.loads(entry) for entry in self._entries[role]]

    def _put(self, ex: Executor, gone: bool = False) -> None:
        entries = self._entries.get(ex.role)
        if entries is not None and ex.index < len(entries):
            address = None if gone else ex.address
            entries[ex.index] = _NULL if address is None else json.dumps(address).encode()

    def _bump(self, role: str) -> None:
        self.record.cluster_version += 1
        self._changed_at[role] = self.record.cluster_version
        for viewer, view in self.views.items():
            if role in view:
                self._versions[viewer] = self.record.cluster_version
