"""Compiling policy expressions once per policy and naming policy/field/position when that fails."""

from __future__ import annotations

import threading
from collections.abc import Callable

from stockade.cel import CelCompileError, CelEnvironment, CelProgram
from stockade.celpolicy.errors import PolicyCompileError

# One environment serves every CEL policy kind: variables are dynamically typed, and declaring a superset costs
# nothing at run time.  Library namespaces (resource, http, image, ...) are functions, not variables.
POLICY_VARIABLES: tuple[str, ...] = (
    "object",
    "oldObject",
    "request",
    "namespaceObject",
    "variables",
    "exceptions",
    "params",
    "authorizer",
)


class PolicyCompiler:
    """Caches compiled programs per policy identity (``policy_key``) and field path; thread-safe."""

    def __init__(self, environment: CelEnvironment | None = None) -> None:
        self.environment = environment or CelEnvironment(POLICY_VARIABLES)
        self._programs: dict[tuple[str, str, str], CelProgram] = {}
        self._lock = threading.Lock()

    def compile(self, policy_key: str, field_path: str, expression: str) -> CelProgram:
        """Compile ``expression`` found at ``field_path`` of the policy; raise :class:`PolicyCompileError`."""
        cache_key = (policy_key, field_path, expression)
        with self._lock:
            cached = self._programs.get(cache_key)
        if cached is not None:
            return cached
        try:
            program = self.environment.compile(expression)
        except CelCompileError as error:
            raise PolicyCompileError(policy_key, field_path, error) from error
        with self._lock:
            self._programs[cache_key] = program
        return program

    def retain(self, keep: Callable[[str], bool]) -> None:
        """Drop the programs of every policy key ``keep`` refuses: a long-lived compiler (the server's, reused across
        policy reloads) then holds only programs of policies still loaded and unchanged."""
        with self._lock:
            self._programs = {key: program for key, program in self._programs.items() if keep(key[0])}

    @property
    def compiled_count(self) -> int:
        return len(self._programs)
