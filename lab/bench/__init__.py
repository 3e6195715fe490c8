"""Measurements that ``make bench`` runs (``reconciliation.management.commands.bench``).

Measurement only: nothing here changes how Holdfast works.
"""
