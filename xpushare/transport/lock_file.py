"""A run's lease as a lock file on a host (host mode: the cluster's first GPU host), through ``sh``.

The file holds the holder as one JSON line (:meth:`~xpushare.model.lease.Holder.to_json` plus ``renewed``).
Every step is one ``sh`` command on the host, atomic by the file system:

* create: the content goes to a private temporary file first, then ``ln`` links it under the lock's name
  (a hard link fails when the name exists, and a reader never sees a half-written file);
* renew: rewrite a temporary file and ``mv`` it over the lock (only while the lock holds our token);
  the file's mtime is the renewal time;
* take (stale): ``mv`` the lock aside (one taker wins the rename), check it is the content read, then create;
* release: remove the lock if it holds our token.

The age of the lock is the host's ``date +%s`` minus the file's mtime: both from the host's own clock.
On a directory with the sticky bit (``/tmp``) only the user who wrote a lock can take it over when stale;
give a shared directory (parameter ``lease_path``) where several users run on one cluster.
"""

from __future__ import annotations

from datetime import datetime, timezone

from xpushare.model.errors import TransportError
from xpushare.model.lease import Holder, LeaseSettings, Observed
from xpushare.transport.base import Host

_TIMEOUT_S = 30.0
_BUSY = 3  # exit status of the scripts: the lock exists / changed / is not ours

_READ = '[ -e "$1" ] || exit 3; m=$(stat -c %Y "$1" 2>/dev/null) || exit 3; echo "$(date +%s) $m"; cat "$1"'
_CREATE = (
    'd=$(dirname "$1"); [ -d "$d" ] || mkdir -p "$d" || exit 4; t="$1.$2.new"; '
    'printf "%s\\n" "$3" > "$t" || exit 4; '
    'if ln "$t" "$1" 2>/dev/null; then rm -f "$t"; exit 0; fi; rm -f "$t"; '
    '[ -e "$1" ] && exit 3; echo "cannot create $1" >&2; exit 4'
)
_OURS = 'grep -qF "\\"token\\": \\"$2\\"" "$1" 2>/dev/null'
_RENEW = f'{_OURS} || exit 3; t="$1.$2.new"; printf "%s\\n" "$3" > "$t" && mv -f "$t" "$1"'
_TAKE = (
    'o="$1.$2.old"; mv "$1" "$o" 2>/dev/null || exit 3; '
    'if [ "$(cat "$o")" != "$4" ]; then ln "$o" "$1" 2>/dev/null; rm -f "$o"; exit 3; fi; rm -f "$o"; ' + _CREATE
)
_RELEASE = f'{_OURS} && rm -f "$1"; exit 0'


class LockFileStore:
    """The :class:`~xpushare.model.lease.LeaseStore` of a host-mode cluster: the lock file ``path`` on ``host``."""

    def __init__(self, host: Host, path: str) -> None:
        self.host = host
        self.path = path
        self.where = f"lock file {path} on {host.name}"

    def _sh(self, script: str, *args: str) -> bool:
        """Run one script; True on 0, False on "busy"; raises TransportError otherwise."""
        res = self.host.run(["sh", "-c", script, "sh", self.path, *args], timeout=_TIMEOUT_S)
        if res.exit_code in (0, _BUSY):
            return res.exit_code == 0
        raise TransportError(self.host.name, f"{self.where}: {res.stderr.strip() or f'exit {res.exit_code}'}")

    @staticmethod
    def _content(holder: Holder) -> str:
        return holder.to_json(renewed=datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def read(self) -> Observed | None:
        res = self.host.run(["sh", "-c", _READ, "sh", self.path], timeout=_TIMEOUT_S)
        if res.exit_code == _BUSY:
            return None
        first, _, content = res.stdout.partition("\n")
        try:
            now, mtime = (int(x) for x in first.split())
        except ValueError:
            raise TransportError(self.host.name, f"{self.where}: cannot read it ({res.stderr.strip()})") from None
        content = content.rstrip("\n")
        try:
            holder: Holder | None = Holder.from_json(content)
        except ValueError:
            holder = None
        return Observed(holder, float(max(0, now - mtime)), content)

    def create(self, holder: Holder, settings: LeaseSettings) -> bool:
        return self._sh(_CREATE, holder.token, self._content(holder))

    def take(self, holder: Holder, settings: LeaseSettings, stale: Observed) -> bool:
        return self._sh(_TAKE, holder.token, self._content(holder), stale.version)

    def renew(self, holder: Holder, settings: LeaseSettings) -> bool:
        return self._sh(_RENEW, holder.token, self._content(holder))

    def release(self, holder: Holder) -> None:
        self._sh(_RELEASE, holder.token)
