"""Level-independent measurement: the blocked timer, statistics, peak memory, devices and
determinism. Every level measures through these modules."""
