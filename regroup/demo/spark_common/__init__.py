"""What the two PySpark demos share: the stateless one (`regroup.demo.spark_demo`, run by
``regroup demo --stateless``) and the stateful one (`regroup.demo.stateful_demo`, the default).

Both run N Spark member processes against one coordinator and one log while a producer writes a
steady keyed workload, change the membership four times (scale out, scale in, static roll, kill -9)
and check what came out. Each module here holds the rules of one job that both follow, and states
them at its top: `processes` (the gated member processes and their lifecycle), `member` (inside a
member process), `scenario` (waiting, the events, the drain), `run` (one run, start to report),
`live` (what the terminal shows) and `result` (the typed result as JSON).

What differs stays in each demo, explicit (a subclass's override, or a parameter): the pipeline,
what the coordinator is asked for, what "steady" means before an event, when the events happen,
how long a stopping member may take, and everything the demo measures. Nothing here imports either
demo.
"""
