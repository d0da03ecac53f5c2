"""Level 0: operator benchmarks (Deep500 L0).

``point.run_point(ctx)`` times one operator point with the shared timer (d5pipe.measure.timer),
reports the median time with its 95% CI, GFLOP/s and GB/s (CI carried through), % of the machine's
measured peak, and checks the forward result and the gradients against a float64 reference.

Modules: ``schema`` (the ``operators`` section), ``validate`` (checks before any job), ``spec``
(what an operator is), ``operators`` (built-ins, FLOP/byte conventions), ``registry`` (lookup,
custom operators), ``correctness`` (the checks against the float64 reference; tolerances: d5pipe.levels.verify), ``point`` (one point; the machine peak is d5pipe.measure.peak).
The deliberately broken operators of the tests are test code: tests/plugin_fixtures/testing_ops.py.
"""
