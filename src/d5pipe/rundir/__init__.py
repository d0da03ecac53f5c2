"""Where a run is written: ``RunDir`` (every path of a run directory, files parsed once), the point
``Record`` format, the manifest, the plan files, ownership and locks of a run directory, and the
prepared datasets shared by run directories (``data_cache``)."""
