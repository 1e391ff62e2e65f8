"""regroup.streams (shell): the plain-Python streams-group member — tasks, their state and its changelog.

A streams-group member runs tasks (`regroup.protocol.streams.topology.TaskId`) as active, standby or
warm-up. Each copy of a task's state is a `store.TaskStore`: a local SQLite key-value store whose every
change the active also writes to a changelog partition of the group's log, so that other copies (and a
restarted member) rebuild it by reading that changelog. `changelog` holds the changelog's record
format, its topic naming, and the offset-commit metadata that ties the coordinator's committed source
offsets to a point in the changelog; `local` is the SQLite file; `errors` the exceptions.

`app.StreamsApp` is the member itself (the user's function per record, a `TaskContext` with the task's
store and `send`), and `membership` its session with the coordinator. The store and the changelog sit
on `regroup.log` and `regroup.protocol` only; the app adds the client.

Public API: `StreamsApp`, `TaskContext`, `TaskStore`, `StreamsError`, `StateStoreError`.
"""

from regroup.streams.app import StreamsApp, StreamsError, TaskContext
from regroup.streams.errors import StateStoreError
from regroup.streams.store import TaskStore

__all__ = ["StateStoreError", "StreamsApp", "StreamsError", "TaskContext", "TaskStore"]
