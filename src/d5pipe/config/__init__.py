"""What to run: the root schema and one schema per config group (``schema``; the levels' own
sections come from d5pipe.levels.registry), Hydra composition (``compose``), the check of every
value before any job (``validate``), recipes (``recipes``) and the user's code directory
(``code_dir``)."""
