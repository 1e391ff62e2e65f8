"""Streams groups: topology, tasks and the task assignor."""
