"""What every layer shares, and imports nothing else of d5pipe: the user-error type, the user
cache directory, canonical JSON and hashing, seeds, atomic writes and safe YAML, config fields and
their checks, stage resources, the metric and point-outcome types, and the admission of user code
(the allow-list and the hash of the source that was allowed)."""
