"""Pure and torch-free planning: sweep expansion (``sweep``), the points of each stage with their
IDs, seeds, costs and shards (``build``), one point's config (``point_config``), the plan a run
directory remembers (``cache``), shard packing by cost (``cost``) and the points this environment
cannot run (``availability``)."""
