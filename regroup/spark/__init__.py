"""regroup.spark (shell)."""
