"""Loading a rule's ``context`` entries into the engine context.

The engine itself never does I/O: ConfigMaps, API calls, image metadata and global context come from providers the
caller supplies (the CLI answers them from test files; the server from the cluster). An entry whose provider is
missing is left out, as Kyverno's CLI does, so a policy referencing it fails with Kyverno's "Unknown key" error.
"""

from __future__ import annotations

from stockade.errors import StockadeError
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stockade.engine.context import ContextError, EngineContext
from stockade.engine.variables import SubstitutionError, substitute_all
from stockade.jmespath import JMESPathError, compile_expression


class ContextLoadError(ContextError):
    """A context entry could not be loaded (a ContextError, so a lazy load failing inside a query surfaces where
    the query's errors do)."""


class ContextSourceDisabled(StockadeError):
    """Raised by an API-call provider that cannot answer this call at all (the offline CLI without
    ``clusterResources``): the entry is left out as if its provider were missing, ``default`` included."""


ConfigMapResolver = Callable[[str, str], dict[str, Any] | None]
APICallResolver = Callable[[dict[str, Any], EngineContext], Any]
ImageDataResolver = Callable[[str, dict[str, Any]], Any]
GlobalContextResolver = Callable[[str], Any]
RuleValuesResolver = Callable[[str, str], dict[str, Any] | None]
ForeachValuesResolver = Callable[[str, str], dict[str, list[Any]] | None]
NamespaceResolver = Callable[[str], dict[str, Any] | None]
"""Namespace name → the Namespace object as the cluster stores it (None when it does not exist)."""
KindScopeResolver = Callable[[str, str], bool | None]
"""(apiVersion, kind) → whether the cluster serves the kind namespaced; None when the cluster does not know it."""
AuthorizationResolver = Callable[[dict[str, Any], dict[str, Any]], tuple[str, str]]
"""(user info, attributes of a CEL ``authorizer`` check) → (decision "allow"/"deny"/"noOpinion", reason), answered by
the cluster's authorizer (a SubjectAccessReview)."""


@dataclass
class ContextProviders:
    """Where context data comes from; ``None`` disables that entry type."""

    configmaps: ConfigMapResolver | None = None
    api_calls: APICallResolver | None = None
    image_data: ImageDataResolver | None = None
    global_context: GlobalContextResolver | None = None
    rule_values: RuleValuesResolver | None = None
    foreach_values: ForeachValuesResolver | None = None
    # Cluster facts rule handlers need beyond context entries (validate.cel's namespaceObject and paramKind scope).
    namespaces: NamespaceResolver | None = None
    kind_namespaced: KindScopeResolver | None = None
    authorizer: AuthorizationResolver | None = None


def _search(expression: str, data: Any) -> Any:
    return compile_expression(expression).search(data)


def _project(expression: str | None, data: Any, name: str) -> Any:
    """Apply an entry's optional ``jmesPath`` to the data a provider returned."""
    if not expression:
        return data
    try:
        return _search(expression, data)
    except JMESPathError as exc:
        raise ContextLoadError(f"failed to apply JMESPath {expression} for context entry {name}: {exc}") from None


class ContextLoader:
    """Loads context entries for one policy, honouring user-supplied values first (CLI ``values`` files)."""

    def __init__(self, providers: ContextProviders | None = None, policy_name: str = "", policy_namespace: str = "") -> None:
        self.providers = providers or ContextProviders()
        self.policy_name = policy_name
        self.policy_namespace = policy_namespace

    @property
    def has_values(self) -> bool:
        """Whether user-supplied rule or foreach values may set variables (``load`` does work even without entries)."""
        return self.providers.rule_values is not None or self.providers.foreach_values is not None

    def initialise(self, rule_name: str, ctx: EngineContext, foreach_index: int | None = None) -> set[str]:
        """Apply rule values (and the current foreach element's values); return the names they provide."""
        provided: set[str] = set()
        if self.providers.rule_values is not None:
            for key, value in (self.providers.rule_values(self.policy_name, rule_name) or {}).items():
                ctx.add_variable(key, value)
                provided.add(key.split(".", 1)[0])
        if self.providers.foreach_values is not None:
            values = self.providers.foreach_values(self.policy_name, rule_name) or {}
            index = foreach_index or 0
            for key, items in values.items():
                if isinstance(items, list) and 0 <= index < len(items):
                    ctx.add_variable(key, items[index])
                    provided.add(key.split(".", 1)[0])
        return provided

    def load(
        self,
        entries: list[dict[str, Any]],
        ctx: EngineContext,
        rule_name: str,
        *,
        foreach_index: int | None = None,
        is_delete: bool = False,
    ) -> None:
        provided = self.initialise(rule_name, ctx, foreach_index)
        for entry in entries or []:
            name = str(entry.get("name", ""))
            if name in provided:
                continue
            self._check_entry(entry, name)
            # Kyverno loads context lazily: an entry is read when a query first names it, so a ConfigMap or API
            # call that no evaluated expression needs is never fetched and cannot fail the rule.
            ctx.add_deferred(name, self._deferred_loader(entry, name, is_delete))

    def _deferred_loader(self, entry: dict[str, Any], name: str, is_delete: bool) -> Callable[[EngineContext], None]:
        def load(target: EngineContext) -> None:
            self._load_entry(entry, name, target, is_delete)

        return load

    @staticmethod
    def _check_entry(entry: dict[str, Any], name: str) -> None:
        kinds = ("variable", "configMap", "apiCall", "imageRegistry", "globalReference")
        if not any(entry.get(kind) is not None for kind in kinds):
            raise ContextLoadError(f"missing ConfigMap|APICall|ImageRegistry|Variable in context entry {name}")

    def _load_entry(self, entry: dict[str, Any], name: str, ctx: EngineContext, is_delete: bool) -> None:
        if "variable" in entry and entry["variable"] is not None:
            self._load_variable(entry, name, ctx, is_delete)
        elif entry.get("configMap") is not None:
            if self.providers.configmaps is not None:
                self._load_configmap(entry, name, ctx, is_delete)
        elif entry.get("apiCall") is not None:
            if self.providers.api_calls is not None:
                self._load_api_call(entry, name, ctx, is_delete)
        elif entry.get("imageRegistry") is not None:
            if self.providers.image_data is not None:
                self._load_image_data(entry, name, ctx, is_delete)
        elif entry.get("globalReference") is not None:
            if self.providers.global_context is not None:
                self._load_global(entry, name, ctx, is_delete)
        else:
            raise ContextLoadError(f"missing ConfigMap|APICall|ImageRegistry|Variable in context entry {name}")

    def _substitute(self, value: Any, ctx: EngineContext, name: str, is_delete: bool) -> Any:
        try:
            return substitute_all(value, ctx, is_delete=is_delete)
        except SubstitutionError as exc:
            raise ContextLoadError(f"failed to substitute variables in context entry {name}: {exc}") from None

    def _load_variable(self, entry: dict[str, Any], name: str, ctx: EngineContext, is_delete: bool) -> None:
        variable = entry["variable"] or {}
        source = variable.get("jmesPath")
        expression: Any = None
        if source:
            # Kyverno substitutes the jmesPath first; a variable that resolves to a list or map there is an error
            expression = self._substitute(source, ctx, name, is_delete)
            if not isinstance(expression, str):
                raise ContextLoadError(f"jmespath value must be a string {name} {source}: <nil>")
        default = variable.get("default")
        if default is not None:
            default = self._substitute(default, ctx, name, is_delete)
        value: Any = None
        has_value = "value" in variable and variable["value"] is not None
        if has_value:
            value = self._substitute(variable["value"], ctx, name, is_delete)
        if expression:
            try:
                value = _search(expression, value) if has_value else ctx.query(expression)
            except (JMESPathError, Exception) as exc:
                if default is None:
                    raise ContextLoadError(f'failed to apply jmespath "{expression}" to variable {name}: {exc}') from None
                value = default
        if value is None and default is not None:
            value = default
        if value is None and not has_value and not expression:
            raise ContextLoadError(f"variable {name} has no value, jmesPath or default")
        ctx.set(name, value)

    def _load_configmap(self, entry: dict[str, Any], name: str, ctx: EngineContext, is_delete: bool) -> None:
        spec = self._substitute(entry["configMap"], ctx, name, is_delete)
        namespace = str(spec.get("namespace") or self.policy_namespace or "default")
        assert self.providers.configmaps is not None
        configmap = self.providers.configmaps(namespace, str(spec.get("name", "")))
        if configmap is None:
            raise ContextLoadError(f'failed to retrieve config map for context entry {name}: configmaps "{spec.get("name")}" not found')
        ctx.set(name, configmap)

    def _load_api_call(self, entry: dict[str, Any], name: str, ctx: EngineContext, is_delete: bool) -> None:
        call = self._substitute(entry["apiCall"], ctx, name, is_delete)
        assert self.providers.api_calls is not None
        try:
            data = self.providers.api_calls(call, ctx)
        except ContextSourceDisabled:
            return
        except ContextLoadError:
            if call.get("default") is not None:
                ctx.set(name, call["default"])
                return
            raise
        expression = call.get("jmesPath")
        if expression:
            try:
                data = _search(expression, data)
            except JMESPathError as exc:
                if call.get("default") is not None:
                    data = call["default"]
                else:
                    raise ContextLoadError(f"failed to apply JMESPath {expression} for context entry {name}: {exc}") from None
        ctx.set(name, data)

    def _load_image_data(self, entry: dict[str, Any], name: str, ctx: EngineContext, is_delete: bool) -> None:
        spec = self._substitute(entry["imageRegistry"], ctx, name, is_delete)
        assert self.providers.image_data is not None
        data = self.providers.image_data(str(spec.get("reference", "")), spec)
        ctx.set(name, _project(spec.get("jmesPath"), data, name))

    def _load_global(self, entry: dict[str, Any], name: str, ctx: EngineContext, is_delete: bool) -> None:
        spec = self._substitute(entry["globalReference"], ctx, name, is_delete)
        assert self.providers.global_context is not None
        data = self.providers.global_context(str(spec.get("name", "")))
        ctx.set(name, _project(spec.get("jmesPath"), data, name))
