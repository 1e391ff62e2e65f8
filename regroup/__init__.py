"""regroup: next-generation consumer-group rebalancing for Python and PySpark streaming."""

__version__ = "0.1.0"
