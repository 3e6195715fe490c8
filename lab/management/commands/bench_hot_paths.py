"""``manage.py bench_hot_paths`` (``make bench``): Holdfast's hot paths (claims, end-to-end
applies, list pages) measured against the ceilings of the machine (pgbench, raw SQL, django-q2
no-op tasks, bare writes). The measurements are ``lab/bench/``; this is their command."""

from lab.bench.cli import Command

__all__ = ["Command"]
