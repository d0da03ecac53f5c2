"""A user package for d5pipe: one plug-in of every kind, each in its own module.

Kept empty on purpose: importing ``mypkg.models`` runs this file too, so anything imported here
would become part of every plug-in's code hash (and editing it would re-run every point).
"""
