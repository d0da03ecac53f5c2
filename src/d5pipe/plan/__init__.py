"""Pure and torch-free planning: sweep expansion (``sweep``), point IDs and shards (``build``),
the seed policy (``seeds``), canonical hashing (``canonical``) and recipes (``recipes``)."""
