"""The controller runtime every cluster controller shares: one error boundary (``errors``), a keyed work queue with
per-key backoff (``workqueue``), list/watch informers with an indexed store (``informer``) and reconcilers driven
by a work queue under a small manager that knows about leadership (``controller``).

Nothing here imports ``stockade.controllers``, ``stockade.webhook`` or ``stockade.cli``: the controllers build on
this package, not the other way round.
"""
