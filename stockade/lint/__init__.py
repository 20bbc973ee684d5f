"""Policy linting: Kyverno's admission-time checks of policy documents. It sits above the engine and the CEL policy
kinds because checking a policy means compiling its CEL and parsing its patterns and variables the way they run."""
