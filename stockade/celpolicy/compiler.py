"""Compiling policy expressions once per policy and naming policy/field/position when that fails."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from stockade.cel import CelCompileError, CelEnvironment, CelProgram
from stockade.celpolicy.chain import ValidationChain, build_chain
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
        self._chains: dict[tuple[str, str, str], ValidationChain | None] = {}
        self._chain_index: dict[tuple[str, str, int, int], tuple[Any, Any, ValidationChain | None]] = {}
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

    def validation_chain(self, policy_key: str, variables: Sequence[Any] | None, validations: Sequence[Any] | None,
                         variables_prefix: str = "spec.variables") -> ValidationChain | None:
        """The policy's validations and variables as one program (see :mod:`stockade.celpolicy.chain`), built once
        per policy and variant; None when the policy cannot be chained.  Looked up by the identity of the two lists
        (a loaded policy's spec is the same object every request; the entry holds them, so an id is never reused
        while it is cached), then by their content."""
        identity = (policy_key, variables_prefix, id(variables), id(validations))
        with self._lock:
            held = self._chain_index.get(identity)
        if held is not None and held[0] is variables and held[1] is validations:
            return held[2]
        content = (policy_key, variables_prefix, repr((variables, validations)))
        with self._lock:
            known = content in self._chains
            chain = self._chains.get(content)
        if not known:
            chain = build_chain(self, policy_key, list(variables or []), list(validations or []), variables_prefix)
        with self._lock:
            if len(self._chains) >= 10_000:
                self._chains.clear()
            if len(self._chain_index) >= 10_000:
                self._chain_index.clear()
            self._chains[content] = chain
            self._chain_index[identity] = (variables, validations, chain)
        return chain

    def retain(self, keep: Callable[[str], bool]) -> None:
        """Drop the programs of every policy key ``keep`` refuses: a long-lived compiler (the server's, reused across
        policy reloads) then holds only programs of policies still loaded and unchanged."""
        with self._lock:
            self._programs = {key: program for key, program in self._programs.items() if keep(key[0])}
            self._chains = {key: chain for key, chain in self._chains.items() if keep(key[0])}
            self._chain_index = {key: entry for key, entry in self._chain_index.items() if keep(key[0])}

    @property
    def compiled_count(self) -> int:
        return len(self._programs)
