"""Randomized fault schedules: a seeded generator, an executor that runs one schedule through
Holdfast's services in-process against a real order system, and invariants checked against the
order system's own records. ``manage.py simulate`` and ``tests/lab/test_simulation.py``
drive it (see ``runner``)."""
