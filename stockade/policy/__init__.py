"""Policy documents: loading YAML/JSON from disk, typed views over Kyverno kinds, autogen."""
