"""What to run: the stage registry (``stages``), the schema of every config group (``schema``),
Hydra composition (``compose``) and the check of every value before any job (``validate``)."""
