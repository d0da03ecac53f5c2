"""The history of results across runs: every finished run appended to a DuckDB store
(:mod:`.store`, the rows of a run from :mod:`.run_rows`), queried (:mod:`.queries`), searched for
steps (:mod:`.steps`: change points from ``ruptures``, each confirmed by a test on the runs) and
drawn (:mod:`.trend_page`). A history's noise is the noise between runs, so a series' values are
its runs' values, each the median over the run's repetitions.
"""
