"""The policy as it is now: re-read whenever its file changes.

A curator may edit the policy while ``veil serve`` runs (remove an analyst, lower a budget,
change bounds). Every new connection is set up, and every login checked, against the file as it
is at that moment, never against the copy the server started with.
"""

from __future__ import annotations

import threading

from veil.policy import Policy, file_stamp, load_policy

__all__ = ["LivePolicy"]


class LivePolicy:
    """``current()`` returns the policy, reloaded when the file's mtime, size or inode changed."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self._lock = threading.Lock()
        # the stamp the file had when ``policy`` was read: ``veil serve`` builds the bounded copies between reading
        # the policy and starting the server, and an edit made meanwhile was never applied (red team s36 A1)
        self._stamp = policy.file_stamp if policy.file_stamp is not None else self._stat()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            return file_stamp(self._policy.watch_path)
        except (OSError, TypeError):
            return None

    def current(self) -> Policy:
        with self._lock:
            stamp = self._stat()
            if stamp is not None and stamp != self._stamp:
                self._policy = load_policy(self._policy.watch_path)
                self._stamp = self._policy.file_stamp or stamp
            return self._policy
