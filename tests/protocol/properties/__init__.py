"""The coordinator's property tests, in parts (the tests themselves: tests/protocol/test_properties.py).

=============  =================================================================================
``group``      the group under test, and a frozen view of the coordinator's state before/after a call
``model``      what the coordinator should hold, learnt from what its members sent it
``processes``  the simulated member processes (a `MemberStateMachine` each)
``checks``     the invariants, as named ``assert_*`` functions of views, the model and the processes
``driver``     the hypothesis state machines: the rules, and the one door every coordinator call
               goes through
=============  =================================================================================
"""
