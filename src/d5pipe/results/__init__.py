"""From point records to what a user reads: columns of results.parquet, aggregation,
verdicts, run comparison and the report."""
