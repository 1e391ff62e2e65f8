"""regroup: next-generation consumer-group rebalancing for Python and PySpark streaming."""

from __future__ import annotations

from typing import Any

from regroup.client.partition import TopicPartition

__version__ = "0.1.0"
__all__ = ["Consumer", "Handler", "TopicPartition", "Worker"]


def __getattr__(name: str) -> Any:
    # Lazy, so that using the pure protocol core does not import gRPC and the log backends.
    if name == "Consumer":
        from regroup.client.consumer import Consumer

        return Consumer
    if name in ("Worker", "Handler"):  # what Consumer.run(handler) hands to the handler, and its type
        from regroup.client import workers

        return getattr(workers, name)
    raise AttributeError(f"module 'regroup' has no attribute {name!r}")
