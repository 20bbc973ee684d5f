"""Evaluation of CEL-based policy kinds: Kyverno's policies.kyverno.io kinds (ValidatingPolicy, MutatingPolicy,
GeneratingPolicy, DeletingPolicy and their Namespaced twins, CEL PolicyException), Kubernetes Validating/Mutating
AdmissionPolicy with bindings and params, and ``validate.cel`` rules of ClusterPolicy/Policy.

Pure: callers hand in resources, namespace data and provider objects (``resource.*``, ``http.*``, ...); nothing
here touches files or the network.  Each policy is compiled once (:class:`PolicyCompiler`) and reused for every
resource.
"""

from stockade.celpolicy.errors import PolicyCompileError
from stockade.celpolicy.model import CelPolicy, RULELESS_KINDS
from stockade.celpolicy.request import AdmissionInput, kind_to_resource
from stockade.celpolicy.evaluator import CelPolicyEvaluator
from stockade.celpolicy.kyvernorule import register_validate_cel

# The engine sits below this package, so its validate.cel handler is registered from here.
register_validate_cel()

__all__ = ["AdmissionInput", "CelPolicy", "CelPolicyEvaluator", "PolicyCompileError", "RULELESS_KINDS", "kind_to_resource"]
