"""regroup.sim (shell)."""
