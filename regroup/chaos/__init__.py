"""Chaos testing of a real coordinator process: `regroup chaos fuzz`.

* `values` — the value pools every generated field draws from (boundary integers, hostile strings,
  regexes) and the `Chooser` that makes each choice: a seeded `random.Random` here, hypothesis in the
  tests, so both drive the very same generators.
* `requests` — requests for every method of the gRPC service, built field by field from the protobuf
  descriptors, and plausible ones that follow real members (a join, then heartbeats at its epoch);
  `corrupt` — the same made inconsistent, raw or corrupted bytes, floods, and `generate`.
* `oracle` — one call through a generic channel (bytes in, bytes out, deadlines on everything) and
  what its answer may be: a response that parses and that the project's own client accepts, or a
  clear gRPC status; anything else is a finding.
* `replay` — the state through the API, compared with the store replayed by the server's own code,
  and after a restart.
* `fuzz` — the run: a coordinator process, a well-behaved member in a thread (the canary), N requests,
  the findings and the figures.

A shell layer beside `regroup.bench`: it starts processes and may use everything below it.
"""
