"""Provenance: the environment record and hash, bundles (checksums, archives), reproduce."""
