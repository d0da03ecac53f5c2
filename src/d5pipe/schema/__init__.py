"""Structured configs: the schema of every d5pipe config, registered in Hydra's ConfigStore.

Each section lives in its own module (``schema/<section>.py``) next to the level that reads it.
"""
