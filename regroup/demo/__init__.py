"""regroup's demos: `stateful_demo` (the default: a stateful PySpark pipeline in a streams group),
`spark_demo` (``--stateless``: PySpark streaming queries as consumer group members; the two share
`spark_common`) and `consumer_demo` (``--consumers``: plain Python consumer processes), on a real
coordinator, producer and log (`common`)."""
