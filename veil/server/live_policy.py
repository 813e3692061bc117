"""The policy as it is now: re-read whenever its file changes.

A curator may edit the policy while ``veil serve`` runs (remove an analyst, lower a budget,
change bounds). Every new connection is set up, and every login checked, against the file as it
is at that moment, never against the copy the server started with.
"""

from __future__ import annotations

import os
import threading

from veil.policy import Policy, load_policy

__all__ = ["LivePolicy"]


class LivePolicy:
    """``current()`` returns the policy, reloaded when the file's mtime, size or inode changed."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self._lock = threading.Lock()
        self._stamp = self._stat()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self._policy.path)
        except (OSError, TypeError):
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def current(self) -> Policy:
        with self._lock:
            stamp = self._stat()
            if stamp is not None and stamp != self._stamp:
                self._policy = load_policy(self._policy.path)
                self._stamp = stamp
            return self._policy
