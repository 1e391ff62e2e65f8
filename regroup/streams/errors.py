"""Exceptions of the streams member's state stores.

Mistakes in a call (a ``str`` key, a negative offset) raise ``ValueError`` or ``TypeError`` like any
Python API; the classes here are for the store's own states and for what it finds in the changelog.
Every message names the task and says what the caller can do next.
"""

from __future__ import annotations


class StateStoreError(Exception):
    """Base class of every error raised by ``regroup.streams`` about a state store."""


class StoreClosedError(StateStoreError):
    """The store was closed; open a new `TaskStore` on the same state directory."""


class NotActiveError(StateStoreError):
    """A write (put, delete, flush) on a copy that is not the task's active, or a restore on an active."""


class StoreLockedError(StateStoreError):
    """Another process (or another `TaskStore` in this one) has this task's state file open."""


class FencedError(StateStoreError):
    """A newer active (a higher epoch) wrote a BEGIN marker after this one's: this member is a zombie."""


class ChangelogError(StateStoreError):
    """The changelog does not hold what the protocol needs: a lost commit, a foreign or broken record,
    or a history that contradicts the coordinator's commit metadata."""
