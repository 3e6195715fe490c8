"""Failure drills (``manage.py drill``): the seed's exercises against a running deployment.

Each scenario (``scenarios.py``) opens a dedicated drill case on a sandbox order of the drill
account, drives it with real worker processes that it starts, pauses and kills (``workers.py``),
and checks the outcome against the order system's own records (``deployment.py``). The runner
(``runner.py``) prints progress, writes ``var/drills/drill-<time>.json`` and ``.html`` and a
``DrillRun`` row (``report.py``).
"""
