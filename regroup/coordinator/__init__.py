"""The coordinator service shell: gRPC server, durable record store, timers, topic metadata, metrics,
and the optional dashboard.

| module | job |
|---|---|
| `server` | start-up (recovery), the gRPC server, /metrics, shutdown; `ServerConfig`, `serve` |
| `service` | the servicer: decode, one runtime step per call, perform its effects, answer once durable |
| `handlers` | the gRPC face: request bytes to messages (malformed, large), the guard around every method |
| `large` | the lane of large requests: parsed and checked off the event loop, admitted per client |
| `ends` | where partitions end in the log, for checking commits against it |
| `runtime` | one core step turned into effects (records, history, nudges, deadline, compaction) |
| `memory_store` | the runtime's store in memory (simulator, tests) |
| `store` | SQLite (WAL) record log with group commit and snapshot compaction |
| `codec` | the stored encoding of the core's records |
| `history` | per-group epoch history, worded from the causes the core reports |
| `sources` | topic metadata sources and their refresh |
| `watch` | open Watch streams (nudges) |
| `metrics`, `auth` | Prometheus metrics; token interceptor and TLS |
| `http` | the dashboard (`--http`): routes and access, live events and timelines, OpenAPI |

docs/operations.md explains how to run and operate it.
"""
