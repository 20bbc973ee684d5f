"""The policy engine: pure evaluation of Kyverno rules against resources (no I/O, no server, no cluster client)."""
