"""Level-independent measurement: the blocked timer (and the turn-taking of ``d5pipe ab``'s two
sides, ``lockstep``), statistics, peak memory, devices, determinism, the machine's ceilings, model
FLOPs and process lifetime. Every level measures through these modules."""
