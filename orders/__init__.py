"""The bundled reference order system.

A separate service with its own settings (``orders.settings``) and its own database that
implements the receiving contract (CONTRACT §1). Holdfast reaches it only over HTTP; nothing
outside this package imports it. Run it with ``python -m orders serve``.
"""
