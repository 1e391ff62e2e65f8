"""regroup's demos: `spark_demo` (the default: PySpark streaming queries as group members) and
`consumer_demo` (plain Python consumer processes), on a real coordinator, producer and log."""
