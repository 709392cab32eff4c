"""The inference path as values of pinned charts: vLLM model servers (vllm-stack), their autoscaler (KEDA), the LLM
gateway (LiteLLM) and its database (CloudNativePG). Pure; components/inference/component.py installs them.

Value names are the charts' own (vllm-stack 0.1.12 templates/deployment-vllm-multi.yaml and scaledobject-vllm.yaml,
litellm-helm 0.4.8 templates/deployment.yaml, cloudnative-pg cluster 0.8.1 values.yaml); `gpuctl plan` renders each
with the real Helm, and tests/components/inference reads the rendered objects, not these dicts.
"""

from typing import Any

from components.charts import BUSYBOX_IMAGE
from components.mirror.images import pulled, pulled_repository
from components.site.inference import ExternalApi, Resources, ServedModel
from components.site.site import Pool, Site, Workload
from components.site.wellknown import (
    FLEX_LENT_LABEL,
    GPU_MODEL_LABEL,
    INFERENCE_NAMESPACE,
    PLATFORM_ACCOUNT,
    POOL_LABEL,
    POOL_TAINT,
    PREFETCHED_MARKER,
    PROMETHEUS_URL,
    VALIDATED_LABEL,
)

NAMESPACE = INFERENCE_NAMESPACE
"""The model servers and the gateway (never a team's namespace: components.validate reserves it)."""

ENGINE_RELEASE = "vllm"
GATEWAY_RELEASE = "llm-gateway"
DATABASE_RELEASE = "llm-gateway-db"
GATEWAY_PORT = 4000
"""The litellm-helm chart's service.port."""
ENGINE_PORT = 8000
"""Where vLLM's API server listens in the pod: vllm-stack's servingEngineSpec.containerPort (`chart.container-port`,
templates/_helpers.tpl)."""
ENGINE_SERVICE_PORT = 80
"""The port of each model's engine Service: vllm-stack's servingEngineSpec.servicePort (`chart.service-port`,
templates/service-vllm.yaml), which it forwards to the container port. The values set it and the gateway's api_base
reads it, so the two cannot part."""

# Pinned images (never `latest`). vLLM v0.10.2 serves the v1 engine's metrics; the LiteLLM tag is the one litellm-helm
# 0.4.8's appVersion names (../shared/charts/SOURCES.md); the CloudNativePG PostgreSQL image replaces the chart's
# withdrawn Bitnami one.
VLLM_IMAGE = ("vllm/vllm-openai", "v0.10.2")
LITELLM_IMAGE = ("ghcr.io/berriai/litellm-database", "main-v1.80.5-stable.1")
POSTGRES_IMAGE = "ghcr.io/cloudnative-pg/postgresql:16.6-bookworm"

MASTER_KEY_SECRET = "llm-gateway-master-key"
MASTER_KEY_ENV = "PROXY_MASTER_KEY"
"""The chart's env var for masterkeySecretName; the proxy config reads it as `os.environ/PROXY_MASTER_KEY`."""
ENGINE_KEY_SECRET = "vllm-engine-key"
"""The Secret holding the model servers' API key (components/inference/access.py): vllm-stack's
servingEngineSpec.vllmApiKey gives it to each engine as VLLM_API_KEY (templates/deployment-vllm-multi.yaml), and the
gateway reads it through envFrom (litellm-helm's environmentSecrets), so its one field is named as the gateway's
environment variable."""
ENGINE_KEY_ENV = "VLLM_ENGINE_KEY"
"""The gateway's environment variable holding the engines' key; its model list sends it (`os.environ/...`)."""
DATABASE_NAME = "litellm"
HOSTNAME_LABEL = "kubernetes.io/hostname"
"""The label the kubelet puts on every node (Kubernetes' well-known labels), unlike topology.kubernetes.io/zone, which
only a cloud provider or the operator sets."""
MODELS_MOUNT = "/models"
"""Where a model server sees the node's NVMe cache (read-only)."""

WAITING = "vllm:num_requests_waiting"
"""vLLM's gauge of requests queued in an engine (label model_name): the autoscaler's demand signal."""

ENGINE_STARTUP_PROBE = {"initialDelaySeconds": 15, "periodSeconds": 10, "failureThreshold": 60}
"""How long a model server may load its weights before the kubelet restarts it: 15 + 60 x 10 = 615 s, vllm-stack
0.1.12's own servingEngineSpec.startupProbe (values.yaml), stated because the release's wait is derived from it."""
ENGINE_IMAGE_PULL_S = 300
"""s a node may take to pull the vLLM image (several GB) before the startup probe's clock starts."""
ENGINE_RELEASE_TIMEOUT_S = (ENGINE_STARTUP_PROBE["initialDelaySeconds"] + ENGINE_STARTUP_PROBE["failureThreshold"]
                            * ENGINE_STARTUP_PROBE["periodSeconds"] + ENGINE_IMAGE_PULL_S)
"""s the model servers' release waits for them to be ready: the image pull, then the startup probe's whole window
(pulumi-kubernetes waits 300 s by default, less than the probe allows)."""


GATEWAY_SERVICE = f"{GATEWAY_RELEASE}-litellm"
"""litellm-helm's Service (`litellm.fullname`: the release and the chart's nameOverride `litellm`)."""
GATEWAY_URL = f"http://{GATEWAY_SERVICE}.{NAMESPACE}.svc:{GATEWAY_PORT}"


def engine_service(model: ServedModel) -> str:
    """The Service vllm-stack gives a model: `<release>-<modelSpec.name>-engine-service`."""
    return f"{ENGINE_RELEASE}-{model.name}-engine-service"


def scaled_object(model: str) -> str:
    """The model's ScaledObject, its autoscaler (vllm-stack's templates/scaledobject-vllm.yaml names it so)."""
    return f"{ENGINE_RELEASE}-{model}-scaledobject"


def engine_url(model: ServedModel) -> str:
    return f"http://{engine_service(model)}.{NAMESPACE}.svc:{ENGINE_SERVICE_PORT}/v1"


def database_service() -> str:
    """CloudNativePG's read-write Service: `<cluster>-rw`; the cluster chart names the cluster `<release>-cluster`."""
    return f"{DATABASE_RELEASE}-cluster-rw"


def database_secret() -> str:
    """CloudNativePG's secret for the application owner (`<cluster>-app`: username, password, host, uri)."""
    return f"{DATABASE_RELEASE}-cluster-app"


def inference_class(site: Site) -> str:
    """The PriorityClass of online serving: the table's first Kubernetes class of the inference workload."""
    return next(c.name for c in site.scheduling.classes
                if c.workload == Workload.INFERENCE and c.kubernetes_priority is not None)


def _placement(model: ServedModel) -> dict[str, Any]:
    """Validated nodes with the model's GPU, in the kubernetes pool or a flex node lent to it (runbooks/flex). The pool
    is preferred (a NodeAffinity score, which kube-scheduler weighs with its others), so the lent nodes take the
    replicas the pool has no room for: those past replicas.max (lent_replicas)."""
    common = [{"key": GPU_MODEL_LABEL, "operator": "In", "values": [model.gpu_model]},
              {"key": VALIDATED_LABEL, "operator": "In", "values": ["true"]}]
    terms = [
        {"matchExpressions": [*common, {"key": POOL_LABEL, "operator": "In", "values": [Pool.KUBERNETES.value]}]},
        {"matchExpressions": [*common, {"key": POOL_LABEL, "operator": "In", "values": [Pool.FLEX.value]},
                              {"key": FLEX_LENT_LABEL, "operator": "In", "values": ["true"]}]},
    ]
    pool = {"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": [Pool.KUBERNETES.value]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms},
                             "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": pool}]}}


def model_dir(model: ServedModel) -> str:
    return f"{MODELS_MOUNT}/{model.cache_dir}"


def _model_spec(site: Site, model: ServedModel) -> dict[str, Any]:
    cache = {"name": "model-cache", "mountPath": MODELS_MOUNT, "readOnly": True}
    waiting = f'sum({WAITING}{{namespace="{NAMESPACE}", model_name="{model.name}"}})'
    return {
        "name": model.name,
        "repository": pulled_repository(VLLM_IMAGE[0], site.mirror), "tag": VLLM_IMAGE[1],
        # The weights come from the node's NVMe cache, never the network: a local path, and the hub offline.
        "modelURL": model_dir(model),
        "replicaCount": model.replicas.min,
        "requestCPU": 8 * model.gpus_per_replica, "requestMemory": f"{64 * model.gpus_per_replica}Gi",
        "requestGPU": model.gpus_per_replica,
        "priorityClassName": inference_class(site),
        # The chart passes --no-enable-prefix-caching unless asked: shared system prompts are cheaper cached.
        "vllmConfig": {"tensorParallelSize": model.gpus_per_replica, "enablePrefixCaching": True,
                       **({"maxModelLen": model.max_model_len} if model.max_model_len else {}),
                       "extraArgs": ["--served-model-name", model.name]},
        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}, {"name": "TRANSFORMERS_OFFLINE", "value": "1"}],
        "extraVolumes": [{"name": "model-cache",
                          "hostPath": {"path": site.storage.nvme.cache_path, "type": "Directory"}}],
        "extraVolumeMounts": [cache],
        # The pod starts once the prefetch has finished this model on its node (storage.tiers.prefetch_daemonset).
        "initContainer": {"name": "wait-for-prefetch", "image": pulled(BUSYBOX_IMAGE, site.mirror),
                          "command": ["sh", "-c", f"until [ -f {model_dir(model)}/{PREFETCHED_MARKER} ]; "
                                                  "do echo waiting for the NVMe prefetch; sleep 10; done"],
                          "extraVolumeMounts": [cache]},
        "affinity": _placement(model),
        # Lent flex nodes keep their pool taint (runbooks/flex/lending.py).
        "tolerations": [{"key": POOL_TAINT, "operator": "Equal", "value": Pool.FLEX.value, "effect": "NoSchedule"}],
        "keda": {
            "enabled": True,
            # Past replicas.max, the replicas wait for lent flex nodes: pending, they are the lending signal.
            "minReplicaCount": model.replicas.min, "maxReplicaCount": model.replicas.max + model.lent_replicas,
            "pollingInterval": 15, "cooldownPeriod": 300,
            # The chart's default trigger reads a `model` label vLLM does not set; the engines label model_name.
            "triggers": [{"type": "prometheus", "metadata": {
                "serverAddress": PROMETHEUS_URL, "query": waiting,
                "threshold": str(model.waiting_per_replica)}}],
        },
    }


def vllm_values(site: Site) -> dict[str, Any]:
    return {
        "servingEngineSpec": {
            "enableEngine": True,
            "containerPort": ENGINE_PORT, "servicePort": ENGINE_SERVICE_PORT,
            # A new revision comes up beside the old one and takes traffic only once ready; the old one stays
            # until then (the chart's default, stated because the hot swap depends on it).
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "100%", "maxUnavailable": 0}},
            "startupProbe": {**ENGINE_STARTUP_PROBE, "httpGet": {"path": "/health", "port": ENGINE_PORT}},
            # Ready means the weights are loaded: vLLM's API server answers /health only after the engine started.
            "readinessProbe": {"initialDelaySeconds": 15, "periodSeconds": 5, "failureThreshold": 3,
                               "httpGet": {"path": "/health", "port": ENGINE_PORT}},
            "serviceMonitor": {"enabled": True, "interval": "15s", "scrapeTimeout": "10s", "honorLabels": False},
            # Only the gateway holds the key: a pod that reaches an engine past its NetworkPolicy still gets 401.
            "vllmApiKey": {"secretName": ENGINE_KEY_SECRET, "secretKey": ENGINE_KEY_ENV},
            "modelSpec": [_model_spec(site, m) for m in site.inference.models],
        },
        # The gateway routes and meters; vLLM's own router would be a second, unmetered entry.
        "routerSpec": {"enableRouter": False},
    }


def _per_token(usd_per_mtok: float) -> float:
    return usd_per_mtok / 1e6


def gateway_models(site: Site) -> list[dict[str, Any]]:
    """LiteLLM's model_list: each served model behind its engine Service, each external API with its credential
    from the provider Secret; every entry priced as the cost rules price it."""
    prices = {p.model: p for p in site.inference.prices()}

    def entry(name: str, params: dict[str, Any]) -> dict[str, Any]:
        price = prices[name]
        return {"model_name": name, "litellm_params": {
            **params, "input_cost_per_token": _per_token(price.prompt_usd_per_mtok),
            "output_cost_per_token": _per_token(price.completion_usd_per_mtok)}}

    # LiteLLM's hosted_vllm provider: an OpenAI-compatible vLLM server, sent the engines' key as a Bearer token.
    served = [entry(m.name, {"model": f"hosted_vllm/{m.name}", "api_base": engine_url(m),
                             "api_key": f"os.environ/{ENGINE_KEY_ENV}"})
              for m in site.inference.models]
    return served + [entry(a.name, _external_params(a)) for a in site.inference.external]


def _external_params(api: ExternalApi) -> dict[str, Any]:
    return {"model": api.model, "api_key": f"os.environ/{api.api_key_env}",
            **({"api_base": api.api_base} if api.api_base else {})}


def gateway_config(site: Site) -> dict[str, Any]:
    """The proxy's config.yaml (the chart's proxy_config)."""
    return {
        "model_list": gateway_models(site),
        # Open-source Prometheus metrics since LiteLLM 1.80.0: tokens, spend and requests per team and model.
        "litellm_settings": {"callbacks": ["prometheus"]},
        "general_settings": {"master_key": f"os.environ/{MASTER_KEY_ENV}"},
        # A failed request is reported, not retried behind the client's back: the error-rate gate must see it, and
        # the model servers' surge-and-readiness rollout is what keeps a hot swap clean.
        "router_settings": {"num_retries": 0},
    }


def pod_resources(resources: Resources) -> dict[str, Any]:
    """A container's requests and limits, equal: the pod is QoS Guaranteed, the last the kubelet evicts."""
    amounts = {"cpu": f"{resources.cpu:g}", "memory": f"{resources.memory_gib * 1024:g}Mi"}
    return {"requests": amounts, "limits": dict(amounts)}


def gateway_values(site: Site) -> dict[str, Any]:
    gateway = site.inference.gateway
    return {
        "image": {"repository": pulled_repository(LITELLM_IMAGE[0], site.mirror), "tag": LITELLM_IMAGE[1],
                  "pullPolicy": "IfNotPresent"},
        "replicaCount": gateway.replicas,
        "resources": pod_resources(gateway.resources),
        # No migration Job: litellm-helm 0.4.8's (templates/migrations-job.yaml) takes no priorityClassName, so it ran
        # in the cluster's lowest class, and under Pulumi's Helm (the chart's Helm hooks off) it only ran beside the
        # proxy, never before it. The proxy applies the schema itself at start (litellm/proxy/proxy_cli.py:
        # PrismaManager.setup_database unless disable_prisma_schema_update), in its pods' inference class; Prisma
        # Migrate's advisory lock lets one of the replicas starting together apply it.
        "migrationJob": {"enabled": False},
        "masterkeySecretName": MASTER_KEY_SECRET, "masterkeySecretKey": "master-key",
        "environmentSecrets": [gateway.provider_secret, ENGINE_KEY_SECRET],
        "proxy_config": gateway_config(site),
        # The cost map ships in the image; an air-gapped proxy must not try to fetch it at start-up.
        "envVars": {"LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        # deployStandalone is the condition of the chart's bundled (withdrawn) Bitnami PostgreSQL: off.
        "db": {"useExisting": True, "deployStandalone": False, "endpoint": database_service(),
               "database": DATABASE_NAME,
               "secret": {"name": database_secret(), "usernameKey": "username", "passwordKey": "password"}},
        "pdb": {"enabled": gateway.replicas > 1, "minAvailable": 1},
    }


def gateway_priority_patch(site: Site) -> dict[str, Any]:
    """The inference PriorityClass for the proxy's pods, as a server-side-apply patch of the Deployment the chart
    renders: litellm-helm 0.4.8 has no value for it (templates/deployment.yaml sets no priorityClassName), and without
    one its pods take the cluster's default class, the lowest, first to be preempted. The chart's manifest never
    holds the field, so a later `helm upgrade` leaves it in place."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": GATEWAY_SERVICE, "namespace": NAMESPACE},
            "spec": {"template": {"spec": {"priorityClassName": inference_class(site)}}}}


def database_values(site: Site) -> dict[str, Any]:
    db = site.inference.gateway.database
    return {"cluster": {"instances": db.instances, "imageName": pulled(POSTGRES_IMAGE, site.mirror),
                        "resources": pod_resources(db.resources),
                        # The gateway answers every team's LLM traffic only while its database does.
                        "priorityClassName": inference_class(site),
                        # The chart spreads instances over topology.kubernetes.io/zone, a label no node of this
                        # stack carries; the kubelet sets the hostname label on every node.
                        "affinity": {"topologyKey": HOSTNAME_LABEL},
                        "storage": {"size": f"{db.storage_gib}Gi", "storageClass": db.storage_class},
                        "initdb": {"database": DATABASE_NAME, "owner": DATABASE_NAME}}}


KEDA_VALUES: dict[str, Any] = {}
"""KEDA as shipped: its operator and metrics server; the ScaledObjects come with the model servers."""


def gateway_service_monitor() -> dict[str, Any]:
    """litellm-helm ships no ServiceMonitor: this one scrapes the proxy's Service (GATEWAY_SERVICE, port `http`).
    `/metrics/`, because the proxy answers `/metrics` with a 307 to it."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": GATEWAY_RELEASE, "namespace": NAMESPACE},
        "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "litellm",
                                              "app.kubernetes.io/instance": GATEWAY_RELEASE}},
                 "endpoints": [{"port": "http", "path": "/metrics/", "interval": "15s"}]},
    }


def team_models(site: Site, team: str) -> list[str]:
    """The gateway models a team's key may call: those whose `teams` name it, or that name no team."""
    apis: list[ServedModel | ExternalApi] = [*site.inference.models, *site.inference.external]
    return [a.name for a in apis if a.teams is None or team in a.teams]


def platform_models(site: Site) -> list[str]:
    """The gateway models the platform account's key may call: every served model, whichever teams it is for (the
    acceptance campaign loads the site's own serving, never an external API billed elsewhere)."""
    return [m.name for m in site.inference.models]


TEAM_KEY_SECRET = "llm-gateway"
PLATFORM_KEY_SECRET = f"llm-gateway-{PLATFORM_ACCOUNT}"
"""The platform account's key, in the gateway's namespace: GPUCTL_ACCEPTANCE_KEY comes from it (docs/acceptance.md)."""


def key_secret(name: str, namespace: str) -> dict[str, Any]:
    """What a gateway account's users read to call the gateway; the key itself is added by the component (a
    secret)."""
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": {"base-url": GATEWAY_URL}}


def inference_outputs(site: Site) -> dict[str, Any]:
    """What `gpuctl plan` shows: every model behind the gateway with its price and its serving bounds, and the
    onboarded teams' budgets."""
    prices = {p.model: p for p in site.inference.prices()}
    served = {m.name: m for m in site.inference.models}
    gateway = site.inference.gateway

    def model(name: str, where: str) -> dict[str, Any]:
        m = served.get(name)
        return {"name": name, "serves": where, "prompt_usd_per_mtok": prices[name].prompt_usd_per_mtok,
                "completion_usd_per_mtok": prices[name].completion_usd_per_mtok,
                "replicas": f"{m.replicas.min}-{m.replicas.max} x {m.gpus_per_replica} {m.gpu_model}" if m else "-"}

    return {
        "models": [*(model(m.name, f"vLLM {m.source}@{m.revision}") for m in site.inference.models),
                   *(model(a.name, f"external {a.model}") for a in site.inference.external)],
        "gateway_url": GATEWAY_URL,
        "budgets": {t.name: gateway.budget_of(t.name) for t in site.teams_onboarded()},
        "budget_days": gateway.budget_days,
    }
