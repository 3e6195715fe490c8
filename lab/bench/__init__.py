"""Measurements that ``make bench`` runs (``lab.management.commands.bench``).

Measurement only: nothing here changes how Holdfast works.
"""
