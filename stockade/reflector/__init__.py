"""Flux-style image reflection: pick the latest tag for an ImagePolicy and rewrite `$imagepolicy` markers.

The pure parts live here (no registry or cluster I/O): `semver` (Masterminds
compatible ranges), `policy` (ImagePolicy tag selection) and `markers` (YAML
setter rewriting, which only touches the files it is asked to update).
"""

from stockade.reflector.markers import Change, MarkerError, update_path, update_text
from stockade.reflector.policy import InvalidPolicyError, PolicyError, select_latest
from stockade.reflector.semver import Constraint, SemverError, Version, parse_version

__all__ = [
    "Change",
    "Constraint",
    "InvalidPolicyError",
    "MarkerError",
    "PolicyError",
    "SemverError",
    "Version",
    "parse_version",
    "select_latest",
    "update_path",
    "update_text",
]
