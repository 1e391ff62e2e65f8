"""A directory put on the PYTHONPATH of the regroup source's Spark Python processes (see `sitecustomize`)."""
