# Shared by hack/e2e-cluster.sh and hack/e2e-run.sh (sourced, not run).
e2e_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"
  elif [ -x "$root/.venv/bin/python" ]; then echo "$root/.venv/bin/python"
  else echo python3
  fi
}

e2e_build_cluster_binaries() {
  "$root/.ci/build-apiserver.sh" kube-apiserver kubectl kube-controller-manager kube-scheduler
  "$root/.ci/build-kwok.sh"
}
