"""The four levels (after Deep500). Each is a package that says everything about itself: ``stage``
(its declaration, d5pipe.levels.stage.Level), ``schema`` (its config section), ``validate``
(torch-free checks run by ``d5pipe plan``) and ``point`` (``run_point(ctx)``); ``registry`` collects
the declarations. ``contract`` is what a point receives and returns; ``models``, ``zoo`` and
``datasets`` serve levels 1-3."""
