"""``make bench`` (``manage.py bench_hot_paths``): Holdfast's hot paths measured against the
ceilings of the machine.

    make bench                                   # BENCH_DATABASE_URL, default bench_holdfast
    make bench BENCH_ARGS="--rounds 5 --apply-cases 60 --skip-lists"

Measurement only: nothing here changes how Holdfast works. On PostgreSQL only (the numbers are
meant for PostgreSQL; SQLite is refused), on a database whose name starts with ``bench``: it
writes real rows there (cases, attempts, django-q2 tasks) and leaves the claimed cases
neutralised (no lease running out, no due time) so later rounds and later runs are not
disturbed. Its scratch databases are named after that database (``<name>_pgbench``,
``<name>_orders``), so runs on two bench databases never collide.

Each round runs every measurement once, in turn (interleaved rounds: a slow moment of the shared
machine spreads over all of them); each line prints the median of the rounds with [min–max], and
each comparison ends with the ratio of the medians. A reader's way through:

- ``cli``: the command's options and checks, the rounds, in the order they measure;
- ``anchors``: the machine's ceilings (pgbench, raw SQL ``SKIP LOCKED`` claims, django-q2 no-op
  tasks);
- ``claims``: Holdfast's claims (``case_claim``, ``claim_next_due``), queries and commits per
  claim;
- ``end_to_end``: the safe apply by a real cluster against the order system, the bare writes
  (its ceiling), several worker hosts (``multihost``, ``netns``);
- ``lists``: the list pages at 10k and 1M cases;
- ``report`` and ``goals``: what is printed at the end, and the issue's three goals, each met or
  NOT met with its figure;
- the parts they share: ``context`` (one run), ``series``, ``postgres`` (connections, scratch
  databases, the server's counters), ``cluster`` (the ``qcluster`` subprocess and its tasks,
  ``tasks``), ``cpu`` (the CPU split from ``/proc``), ``deployed_orders`` (the order system as
  deployed), ``seeding`` (the bench's rows), ``database`` (``make bench`` creates the database
  with it before ``migrate``).

``manage.py bench_large_table`` is the other measurement: the watchdog's query, the
dispatcher's selection and claims on a large table, rolled back.
"""
