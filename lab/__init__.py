"""The lab: the tooling that proves the product, apart from the product (the work path).

``lab/bench/`` measures (``make bench``), ``lab/drills/`` drills a running deployment
(``make drill``), ``lab/simulation/`` runs randomized fault schedules (``manage.py simulate``),
``lab/order_system.py`` runs the reference order system as a process. Nothing in ``cases``,
``approvals``, ``reconciliation`` or ``config`` imports it (an import-linter contract), and a
production process loads none of its hooks (``LabConfig.ready``).
"""
