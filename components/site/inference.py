"""The inference section of the site spec: the models the Kubernetes pool serves, the external LLM APIs the teams
call, and the gateway that meters both (`gpu-cluster:inference` in the stack file).

Every LLM request of a team goes through the one gateway (LiteLLM), which attributes it to the team by its key; the
cost rules price the gateway's token counters with the table `Inference.prices` derives here. Rules that span this
section and the rest of the site (teams, GPU models, pool capacity) are in components.site.rules.
"""

from dataclasses import dataclass
from typing import Annotated, Self

from pydantic import Field, model_validator

from components.site import defaults
from components.site.types import Float, Int, LabelValue, ModelPath, Name, Spec

# Multiplies token rates in the cost recording rules; the dearest API output token costs well under $1000 per million.
UsdPerMtok = Annotated[Float, Field(ge=0, le=1000)]
# A budget the gateway holds a team to (LiteLLM's max_budget, a float).
Usd = Annotated[Float, Field(ge=0, le=1e9)]
# A Hugging Face revision (commit hash, tag or branch) or a registry version: a path part on the NVMe cache.
Revision = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=64)]
# Served names end up in Service names (`vllm-<name>-engine-service`, at most 63 characters).
ServedName = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=32)]
Source = Annotated[str, Field(min_length=1, max_length=500)]


class Throughput(Spec):
    """What one replica sustains, the basis of the chargeback price of a self-hosted model."""

    prompt_tokens_per_s: Annotated[Float, Field(gt=0, le=1e7)]
    """prompt (input) tokens per second one replica processes at its usual batch size."""
    completion_tokens_per_s: Annotated[Float, Field(gt=0, le=1e7)]
    """completion (output) tokens per second one replica generates at its usual batch size."""
    source: Source
    """Where the figures come from (the benchmark, its date and settings)."""


class Replicas(Spec):
    min: Annotated[Int, Field(ge=1, le=256)] = 1
    max: Annotated[Int, Field(ge=1, le=256)] = 1

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be at least min ({self.min})")
        return self


class ServedModel(Spec):
    name: ServedName
    """The model's name at the gateway and in vLLM's metrics (`--served-model-name`)."""
    source: ModelPath
    """The model's directory in the registry (storage.nfs_hot.models_export), e.g. `Qwen/Qwen2.5-72B-Instruct`."""
    revision: Revision
    """The version served: `<models_export>/<source>/<revision>` in the registry, prefetched to the same path under
    the NVMe cache. Changing it rolls the model over (surge first, old replicas kept until the new ones are ready)."""
    gpu_model: LabelValue
    """The GPU it runs on (a gpu_catalog key of a kubernetes or flex node group)."""
    gpus_per_replica: Annotated[Int, Field(ge=1, le=16)]
    """GPUs of one replica (vLLM's tensor parallel size)."""
    replicas: Replicas = Replicas()
    """Bounds of the autoscaler on the kubernetes pool."""
    # Added to replicas.max in the autoscaler's bound; checked against the flex nodes the controller may lend
    # (components.site.rules.check_lent_replicas).
    lent_replicas: Annotated[Int, Field(ge=0, le=256)] = 0
    """replicas the autoscaler may add past replicas.max for flex nodes lent to Kubernetes. Model servers run only on
    the kubernetes pool and on lent flex nodes of gpu_model (components/inference/values.py), so with the pool full
    these land on lent nodes, and one of them pending is what makes the lending controller lend. 0 (the default): the
    model never asks for more than replicas.max."""
    waiting_per_replica: Annotated[Int, Field(ge=1, le=10_000)] = defaults.INFERENCE_WAITING_PER_REPLICA
    """Requests waiting in one replica's queue (vLLM's `vllm:num_requests_waiting`) at which another is added."""
    max_model_len: Annotated[Int, Field(ge=256, le=10_000_000)] | None = None
    """Context length (`--max-model-len`); the model's own when unset."""
    teams: list[Name] | None = None
    """Teams whose gateway keys may call it; every onboarded team when unset."""
    throughput: Throughput

    @property
    def cache_dir(self) -> str:
        """Its directory relative to the registry and to the NVMe cache."""
        return f"{self.source}/{self.revision}"


class ExternalApi(Spec):
    name: ServedName
    """The model's name at the gateway."""
    model: Annotated[str, Field(pattern=r"^[a-z0-9_]+/[A-Za-z0-9][A-Za-z0-9._:/-]*$", max_length=200)]
    """LiteLLM's `<provider>/<model>`, e.g. `openai/gpt-4o`."""
    api_key_env: Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]*$", max_length=100)]
    """The key, in the gateway's provider Secret (gateway.provider_secret), that holds this API's credential."""
    api_base: Annotated[str, Field(pattern=r"^https://[^\s\"'\\]+$", max_length=500)] | None = None
    """The provider's endpoint when it is not the provider's default."""
    prompt_usd_per_mtok: UsdPerMtok
    completion_usd_per_mtok: UsdPerMtok
    source: Source
    """Where the prices come from (the provider's price list and its date, or the contract)."""
    teams: list[Name] | None = None
    """Teams whose gateway keys may call it; every onboarded team when unset."""


class Resources(Spec):
    """What one pod is given and held to: requests equal limits, so the kubelet evicts it last (QoS Guaranteed)."""

    cpu: Annotated[Float, Field(gt=0, le=256)]
    """cores"""
    memory_gib: Annotated[Float, Field(gt=0, le=4096)]
    """GiB"""


class Database(Spec):
    """The gateway's PostgreSQL (keys, teams, budgets, spend), run by the CloudNativePG operator."""

    instances: Annotated[Int, Field(ge=1, le=9)] = 3
    """One primary and its streaming replicas; CloudNativePG fails over to a replica."""
    storage_gib: Annotated[Int, Field(ge=1, le=65_536)] = 20
    storage_class: Name = "nvme-local"
    """Local NVMe (PostgreSQL replicates itself, so node-local volumes are what CloudNativePG recommends)."""
    resources: Resources = Resources(cpu=defaults.DATABASE_CPU, memory_gib=defaults.DATABASE_MEMORY_GIB)
    """Of each instance."""


class Gateway(Spec):
    replicas: Annotated[Int, Field(ge=1, le=64)] = 2
    resources: Resources = Resources(cpu=defaults.GATEWAY_CPU, memory_gib=defaults.GATEWAY_MEMORY_GIB)
    """Of each proxy replica."""
    team_budget_usd: Usd = defaults.GATEWAY_TEAM_BUDGET_USD
    """USD a team may spend through the gateway per budget period, unless team_budgets says otherwise."""
    team_budgets: dict[Name, Usd] = {}
    """Per-team budgets (teams[].name: USD per period)."""
    budget_days: Annotated[Int, Field(ge=1, le=366)] = 30
    """days of a budget period; the gateway resets a team's spend after it."""
    admin_url: Annotated[str, Field(pattern=r"^https?://[^\s\"'\\]+[^/]$", max_length=500)] = (
        "http://llm-gateway-litellm.inference.svc:4000")
    """Where `pulumi up` reaches the gateway's admin API to create and remove the teams' keys: an in-cluster Service
    name is reached from the Pulumi host through `kubectl port-forward` (runbooks/gateway/reach.py), any other URL
    (an internal ingress) directly."""
    provider_secret: Name = "llm-provider-keys"
    """Secret in the inference namespace holding the external APIs' credentials (external[].api_key_env keys);
    created by the platform team, never in the stack file."""
    database: Database = Database()

    def budget_of(self, team: str) -> float:
        return self.team_budgets.get(team, self.team_budget_usd)


class Inference(Spec):
    gpu_hour_usd: dict[LabelValue, Annotated[Float, Field(gt=0, le=1e4)]] = {}
    """USD an hour of one GPU costs, per gpu_catalog model: the basis of self-hosted models' token prices."""
    gpu_hour_source: Source = "set the internal chargeback rate (amortised purchase, power, cooling, operations)"
    """Where gpu_hour_usd comes from."""
    models: list[ServedModel] = []
    external: list[ExternalApi] = []
    gateway: Gateway = Gateway()

    def prices(self) -> list["Price"]:
        """The gateway's price table: external APIs at their providers' prices, self-hosted models at the GPU-hour
        cost of a replica spread over what it serves in that hour (each token type priced as if the replica served
        only it). Models without a gpu_hour_usd entry are left out (components.site.rules reports them)."""
        prices = [Price(a.name, a.prompt_usd_per_mtok, a.completion_usd_per_mtok, a.source) for a in self.external]
        for m in self.models:
            if m.gpu_model not in self.gpu_hour_usd:
                continue
            replica_hour = self.gpu_hour_usd[m.gpu_model] * m.gpus_per_replica
            prompt, completion = (replica_hour / (per_s * 3600) * 1e6 for per_s in
                                  (m.throughput.prompt_tokens_per_s, m.throughput.completion_tokens_per_s))
            prices.append(Price(m.name, prompt, completion,
                                f"{self.gpu_hour_source}; throughput: {m.throughput.source}"))
        return prices


@dataclass(frozen=True)
class Price:
    model: str
    """The model's name at the gateway (LiteLLM's `requested_model`)."""
    prompt_usd_per_mtok: float
    completion_usd_per_mtok: float
    source: str
