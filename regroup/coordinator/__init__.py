"""regroup.coordinator (shell)."""
