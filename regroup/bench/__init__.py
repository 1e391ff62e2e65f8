"""regroup.bench (shell)."""
