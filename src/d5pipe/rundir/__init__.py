"""Where a run is written: ``RunDir`` (every path of a run directory, files parsed once), the
point ``Record`` format, the manifest, the plan files and atomic writes."""
