"""Helpers for tests and benchmarks that need real infrastructure beside regroup (not used at run time)."""
