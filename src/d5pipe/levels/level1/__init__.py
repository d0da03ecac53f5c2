"""Level 1: network processing of one model (inference and forward+backward)."""
