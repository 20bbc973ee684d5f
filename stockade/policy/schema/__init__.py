"""Structural schemas of the policy kinds Stockade reads (see ``types`` for the notation)."""
