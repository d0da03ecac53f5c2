"""The four levels (after Deep500), each a package of the same shape: ``schema`` (its config
section), ``validate`` (torch-free checks run by ``d5pipe plan``) and ``point`` (``run_point(ctx)``).
``contract`` is what a point receives and returns; ``models`` and ``datasets`` serve levels 1-3."""
