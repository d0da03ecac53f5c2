"""The history of results across runs: every finished run appended to a DuckDB store
(:mod:`.store`, the rows of a run from :mod:`.run_rows`), queried (:mod:`.queries`), searched for
steps (:mod:`.steps`: change points from ``ruptures``, each confirmed by a test on the runs;
:mod:`.check` explains them) and drawn (:mod:`.trend_page`). A history's noise is the noise between
runs, so a series' values are its runs' values: to find steps, each run's best repetition (the
fastest time, the highest rate: interference only slows a process down); to show, the median with
the lowest and the highest.
"""
