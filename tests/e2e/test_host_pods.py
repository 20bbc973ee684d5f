"""A Pod running a python image (Kyverno's tests start flask servers that way) runs on the host, and its Service
answers through the forward proxy `stockade serve` is given as HTTP_PROXY; deleting the Pod stops it."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from stockade.testing.apiserver import find_binary
from stockade.testing.e2ecluster import E2ECluster

# as mutating-policies/context/api-call/http-post has it, on another port and in its own namespace
MANIFESTS = """\
apiVersion: v1
kind: Namespace
metadata:
  name: host-pods
---
apiVersion: v1
kind: Pod
metadata:
  namespace: host-pods
  name: test-api
  labels:
    app: test-api
spec:
  containers:
  - name: test-api
    image: public.ecr.aws/docker/library/python:3.9-slim
    command: ["sh", "-c"]
    args:
    - |
      pip install flask &&
      echo 'from flask import Flask, jsonify, request
      app = Flask(__name__)
      @app.route("/", methods=["POST"])
      def post_data():
        return jsonify({"received": request.get_json().get("labels")})
      if __name__ == "__main__":
          app.run(host="0.0.0.0", port=5001)' > app.py &&
            python app.py
    ports:
    - containerPort: 5001
---
apiVersion: v1
kind: Service
metadata:
  namespace: host-pods
  name: test-api-service
spec:
  selector:
    app: test-api
  ports:
  - protocol: TCP
    port: 80
    targetPort: 5001
"""


def _post(opener: urllib.request.OpenerDirector, url: str) -> dict[str, object]:
    request = urllib.request.Request(url, data=json.dumps({"labels": "demo"}).encode(), headers={"Content-Type": "application/json"}, method="POST")
    with opener.open(request, timeout=10) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


def test_a_python_pod_answers_through_its_service(tmp_path: Path) -> None:
    cluster = E2ECluster(state_dir=tmp_path / "cluster")
    kubectl = [find_binary("kubectl", "STOCKADE_KUBECTL"), f"--kubeconfig={tmp_path / 'cluster' / 'kubeconfig'}"]
    cluster.up()
    try:
        subprocess.run([*kubectl, "apply", "-f", "-"], input=MANIFESTS, text=True, check=True, capture_output=True, timeout=60)
        proxy = f"http://127.0.0.1:{(cluster.state_dir / 'hostpods.port').read_text()}"
        # stockade serve is started with that proxy, and with the API server out of its reach
        environ = Path(f"/proc/{json.loads(cluster.pid_file.read_text())['stockade']}/environ").read_bytes().split(b"\0")
        assert f"HTTP_PROXY={proxy}".encode() in environ and any(v.startswith(b"NO_PROXY=") and b"127.0.0.1" in v for v in environ)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
        url = "http://test-api-service.host-pods.svc.cluster.local/"
        deadline, answer, last = time.monotonic() + 90, None, ""
        while answer is None and time.monotonic() < deadline:
            try:
                answer = _post(opener, url)
            except (urllib.error.URLError, ConnectionError) as exc:  # the Pod is not scheduled or flask not up yet
                last = str(exc)
                time.sleep(1)
        assert answer == {"received": "demo"}, f"{last}; {(cluster.state_dir / 'host-pods.log').read_text()[-3000:]}"
        running = json.loads((cluster.state_dir / "host-pods.json").read_text())
        assert running["host-pods/test-api"]["ports"] == [5001]
        pid = running["host-pods/test-api"]["pid"]

        subprocess.run([*kubectl, "delete", "pod", "-n", "host-pods", "test-api", "--wait=true", "--timeout=60s"], check=True, capture_output=True, timeout=90)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not Path(f"/proc/{pid}").exists()
        assert "host-pods/test-api" not in json.loads((cluster.state_dir / "host-pods.json").read_text())
        try:
            _post(opener, url)
        except (urllib.error.URLError, ConnectionError):
            pass
        else:
            raise AssertionError("the Service still answered after its only Pod was deleted")
    finally:
        cluster.down()
