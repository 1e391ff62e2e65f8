"""The protocol core: pure state machines, no I/O.

Everything that decides anything about group membership, assignment, reconciliation, epochs, timers
and offsets lives in this package. It never reads a clock, opens a socket, starts a thread or draws
a random number: time and generated identifiers are arguments. The coordinator service, the Python
consumer, the PySpark source and the simulator all drive these same objects.
"""
