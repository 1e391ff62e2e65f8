"""The coordinator service shell: gRPC server, durable record store, timers, topic metadata, metrics.

| module | job |
|---|---|
| `server` | start-up (recovery), the gRPC server, /metrics, shutdown; `run_coordinator`, `serve` |
| `service` | the servicer: one core step per call, persist, nudge, answer once durable; timers |
| `store` | SQLite (WAL) record log with group commit and snapshot compaction |
| `codec` | the stored encoding of the core's records |
| `history` | per-group epoch history derived from the records |
| `sources` | topic metadata sources and their refresh |
| `watch` | open Watch streams (nudges) |
| `metrics`, `auth` | Prometheus metrics; token interceptor and TLS |

docs/operations.md explains how to run and operate it.
"""
