"""regroup.client (shell)."""
