"""Kubernetes objects of one vLLM model server, rendered as plain dicts from the settings."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from components.gpu_nodes.render import toleration as gpu_toleration
from settings import ModelSettings
from settings.endpoints import KV_EVENTS_PORT
from settings.precise import TOPIC_PREFIX

# The Secret holding the Hugging Face token, shared by every model of the namespace.
HF_TOKEN_SECRET = "hf-token"
HF_TOKEN_KEY = "token"
GPU_RESOURCE = "nvidia.com/gpu"
PART_OF = "inference-gateway"

# vLLM downloads and loads the weights before /health answers: up to 15 minutes (90 x 10 s)
# for a cold node pulling a large model, after which the liveness probe takes over.
STARTUP_PERIOD_SECONDS = 10
STARTUP_FAILURES = 90

# As far as the vllm/vllm-openai image allows. Its Dockerfile (docker/Dockerfile, stage
# vllm-openai: ENTRYPOINT vllm serve) sets no USER, so vLLM runs as root and keeps its caches
# under /root; runAsNonRoot would refuse to start it. vLLM needs no capability: it binds a port
# above 1024, reaches the GPUs through the device nodes the NVIDIA runtime mounts, and its
# tensor-parallel workers share memory through /dev/shm. So: every capability dropped, no
# privilege escalation (setuid binaries stay inert), the runtime's default seccomp profile, and
# a read-only root filesystem with a volume for each path vLLM writes (below).
SECURITY_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
    "readOnlyRootFilesystem": True,
}
# Where vLLM writes, each an emptyDir: HOME, where every cache of vLLM and its libraries defaults
# (Hugging Face, vLLM's torch.compile cache, Triton, FlashInfer's JIT, Outlines, Numba under
# ~/.cache, CUDA's ~/.nv, vLLM's usage-stats file under ~/.config); /tmp, where vLLM puts its ZMQ
# IPC sockets (tempfile.gettempdir()) and torch's inductor its cache; /dev/shm, for tensor-parallel
# workers (the container default is 64 MiB); the Hugging Face cache, a volume of its own.
WRITABLE_PATHS = (("home", "/root"), ("tmp", "/tmp"), ("dshm", "/dev/shm"), ("hf-cache", "/root/.cache/huggingface"))


def pod_labels(model: ModelSettings) -> dict[str, str]:
    # `app` is the scheduler's modelSelector and the label the seed's kubectl commands use.
    return {**model.selector, "app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": model.deployment,
            "app.kubernetes.io/part-of": PART_OF, "inference-gateway/model": model.name}


# The pod's own address, which Kubernetes substitutes for $(POD_IP) in the arguments: the event
# topic names its pod as llm-d's guides do (the picker keys a pod by the address it dials instead).
POD_IP_ENV = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def kv_events_config(model: ModelSettings) -> str:
    """vLLM's --kv-events-config under the precise prefix index: publish over ZMQ, bound on every
    address of the pod (a `*` endpoint binds; the picker connects), on a topic the picker's `kv@`
    filter takes whose last part is the model name requests carry. No replay socket: see
    docs/configuration.md, "Precise prefix-cache routing"."""
    return json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{KV_EVENTS_PORT}",
                       "topic": f"{TOPIC_PREFIX}$(POD_IP)@{model.model}"})


def vllm_args(model: ModelSettings) -> list[str]:
    """Arguments to the image's entrypoint, `vllm serve`, which takes the model positionally
    (`--model` there is deprecated: vLLM 0.32 warns that it will be removed)."""
    args = [model.model, "--port", str(model.port),
            # Explicit although newer vLLMs default to it: the gateway's prefix scorer assumes it.
            "--enable-prefix-caching"]
    if model.gpus > 1:
        args += ["--tensor-parallel-size", str(model.gpus)]
    if model.max_model_len is not None:
        args += ["--max-model-len", str(model.max_model_len)]
    if model.gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", f"{model.gpu_memory_utilization:g}"]
    if model.routing.precise is not None:
        # --enable-scale-out serves the /render endpoints the picker's token producer asks for
        # vLLM's own tokens (vLLM 0.32 answers them 403 without it).
        args += ["--block-size", str(model.routing.precise.block_size_tokens),
                 "--kv-events-config", kv_events_config(model), "--enable-scale-out"]
    return args + list(model.extra_args)


def deployment(model: ModelSettings, namespace: str, *, hf_token: bool,
               gpu_node_selector: Mapping[str, str] | None) -> dict[str, Any]:
    """The model's Deployment. With autoscaling it names no replica count: KEDA's autoscaler owns
    it, and a count here would be reset to at every `pulumi up`."""
    labels = pod_labels(model)
    health = {"httpGet": {"path": "/health", "port": "http"}}
    container: dict[str, Any] = {
        "name": "vllm",
        "image": model.image,
        "args": vllm_args(model),
        "ports": [{"name": "http", "containerPort": model.port, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": model.cpu, "memory": model.memory, GPU_RESOURCE: str(model.gpus)},
            "limits": {GPU_RESOURCE: str(model.gpus)},
        },
        "startupProbe": {**health, "periodSeconds": STARTUP_PERIOD_SECONDS, "failureThreshold": STARTUP_FAILURES},
        "readinessProbe": {**health, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**health, "periodSeconds": 15, "timeoutSeconds": 5, "failureThreshold": 4},
        "securityContext": dict(SECURITY_CONTEXT),
        "volumeMounts": [{"name": name, "mountPath": path} for name, path in WRITABLE_PATHS],
    }
    env = []
    if hf_token:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": HF_TOKEN_SECRET, "key": HF_TOKEN_KEY}}})
    if model.routing.precise is not None:
        env.append(POD_IP_ENV)
        container["ports"].append({"name": "kv-events", "containerPort": KV_EVENTS_PORT, "protocol": "TCP"})
    if env:
        container["env"] = env
    pod_spec: dict[str, Any] = {
        "containers": [container],
        # vLLM never calls the Kubernetes API: its pods carry no token for it.
        "automountServiceAccountToken": False,
        "volumes": [
            {"name": "home", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
            # Tensor-parallel workers exchange activations through shared memory.
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}},
            {"name": "hf-cache", "emptyDir": {}},
        ],
        "tolerations": [gpu_toleration()],
        # One replica per node where possible, so a node loss takes one replica, not all.
        "topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(model.selector)},
        }],
        # In-flight generations finish before the pod goes.
        "terminationGracePeriodSeconds": 60,
    }
    if gpu_node_selector:
        pod_spec["nodeSelector"] = dict(gpu_node_selector)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": model.deployment, "namespace": namespace, "labels": labels},
        "spec": {
            **({"replicas": model.replicas} if model.autoscaling is None else {}),
            "selector": {"matchLabels": dict(model.selector)},
            # Never below the serving replicas: the new pod must be Ready before an old one goes.
            # That needs one spare GPU; the settings warn when gpuNodes.desired leaves none.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def service(model: ModelSettings, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": model.deployment, "namespace": namespace, "labels": pod_labels(model)},
        "spec": {
            "type": "ClusterIP",
            "selector": dict(model.selector),
            "ports": [{"name": "http", "port": model.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def pod_disruption_budget(model: ModelSettings, namespace: str) -> dict[str, Any] | None:
    """Keeps node drains from taking more than one replica at a time; pointless for a single replica."""
    if model.max_replicas <= 1:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": model.deployment, "namespace": namespace, "labels": pod_labels(model)},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": dict(model.selector)}},
    }


def namespace_manifest(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": PART_OF}}}


def hf_token_secret(namespace: str) -> dict[str, Any]:
    """The Secret's shape; its value is added by the component as a Pulumi secret, never rendered here."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": HF_TOKEN_SECRET, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": PART_OF}}}
