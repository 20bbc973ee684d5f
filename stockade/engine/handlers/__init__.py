"""One handler per rule type, in the spirit of Kyverno's ``pkg/engine/handlers``."""
