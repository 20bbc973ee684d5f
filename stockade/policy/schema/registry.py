"""Which kinds Stockade has schemas for, by API group and kind."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import lru_cache

from stockade.policy.schema.types import KindSchema


class SchemaRegistry:
    """Kinds by (group, kind); a group is "known" once any of its kinds is registered."""

    def __init__(self, kinds: Iterable[KindSchema] = ()) -> None:
        self._kinds: dict[tuple[str, str], KindSchema] = {}
        self._groups: dict[str, list[KindSchema]] = {}
        for kind in kinds:
            self.register(kind)

    def register(self, kind: KindSchema) -> None:
        key = (kind.group, kind.kind)
        if key in self._kinds:
            raise ValueError(f"{kind.kind}.{kind.group} is registered twice")
        self._kinds[key] = kind
        self._groups.setdefault(kind.group, []).append(kind)

    def lookup(self, group: str, kind: str) -> KindSchema | None:
        return self._kinds.get((group, kind))

    def group(self, group: str) -> list[KindSchema]:
        return list(self._groups.get(group, ()))

    def __iter__(self) -> Iterator[KindSchema]:
        return iter(self._kinds.values())


@lru_cache(maxsize=1)
def default_registry() -> SchemaRegistry:
    """Every policy kind Stockade reads: Kyverno's two groups and the Flux image kinds."""
    from stockade.policy.schema.celpolicies import KINDS as CEL_POLICY_KINDS
    from stockade.policy.schema.flux import KINDS as FLUX_KINDS
    from stockade.policy.schema.kyverno import KINDS as KYVERNO_KINDS

    return SchemaRegistry([*KYVERNO_KINDS, *CEL_POLICY_KINDS, *FLUX_KINDS])
