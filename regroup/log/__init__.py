"""regroup.log (shell)."""
