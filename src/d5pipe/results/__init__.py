"""From point records to what a user reads: the one results pass (``run_results``), the columns of
results.parquet, checks and verdicts, the one comparison model (``timing_compare``), side-by-side
pairs within a run (``comparisons``), runs compared with each other (``compare``) and the report."""
