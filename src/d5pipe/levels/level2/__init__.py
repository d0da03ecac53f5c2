"""Level 2: training runs (one per point), seeded and checked against recipes."""
