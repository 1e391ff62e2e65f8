"""regroup.sim: deterministic simulation over the protocol core (docs/simulation.md).

=====================  ==========================================================================
``engine``             virtual time, the event queue ordered by (time, seq), the event log and digest
``network``            latency and faults between members and the coordinator; calls and messages
``workload``           the partitioned log, the poll-loop cadence, a process's work on its shards
``observers``          what consumers report (acquire, activate, processed, stop, release)
``invariants``         the checker, fed observations and coordinator records
``keyranges``          key-range runs: which key each record carries, which records a range processes
``key_invariants``     the checker of key-range runs: the processing rules key by key
``coordinator_node``   the real `Coordinator` behind a simulated shell (durable log, timers, restarts)
``member_node``        a consumer process driving the real `MemberStateMachine`
``kip848``             a group on the real core, with nudges (regroup) or without (KIP-848 as shipped)
``classic_*``          the classic JoinGroup/SyncGroup baselines, eager and cooperative
``system``             the protocol-independent verbs scenarios use
``faults``             seeded random fault plans for the sweep
``check``              one seed, a sweep, the liveness phase, replay commands
``scenarios``          the comparison scenarios and one run of one against one protocol
``metrics``            time to stable, unavailability, bystander pause, moves, barrier rounds
``compare``, ``plots``  the comparison table and its figures
``commands``           ``regroup sim check`` and ``regroup sim compare``
``inproc``             the smallest in-process driver (walkthrough, benchmarks)
=====================  ==========================================================================
"""
