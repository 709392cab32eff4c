"""The inference path as one component: KEDA, the gateway's database, the model servers (behind their API key and a
NetworkPolicy that admits only the gateway and Prometheus), the gateway and its scrape,
each onboarded team's account on the gateway (created on onboarding, removed on rollback), and the platform's; the
lending controller's right to set the lent models' replica floor (components.scheduling.controller_access)."""

import shlex
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_kubernetes as kubernetes

from components.charts import CLOUDNATIVE_PG, CLOUDNATIVE_PG_CLUSTER, KEDA, LITELLM, VLLM_STACK
from components.inference.access import engine_key, engine_key_secret, engine_network_policy
from components.inference.values import (
    DATABASE_RELEASE,
    ENGINE_KEY_ENV,
    ENGINE_RELEASE,
    ENGINE_RELEASE_TIMEOUT_S,
    GATEWAY_RELEASE,
    KEDA_VALUES,
    MASTER_KEY_SECRET,
    NAMESPACE,
    PLATFORM_KEY_SECRET,
    TEAM_KEY_SECRET,
    database_values,
    gateway_priority_patch,
    gateway_service_monitor,
    gateway_values,
    inference_outputs,
    key_secret,
    platform_models,
    scaled_object,
    team_models,
    vllm_values,
)
from components.k8s import custom, fields, rbac, release
from components.scheduling.controller_access import replica_floor_access
from components.scheduling.lending_decision import borrowers
from components.site.site import Site
from components.site.wellknown import DATABASE_OPERATOR_NAMESPACE, INFERENCE_TYPE, KEDA_NAMESPACE, PLATFORM_ACCOUNT


def _namespace(name: str, namespace: str, parent: pulumi.Resource) -> kubernetes.core.v1.Namespace:
    return kubernetes.core.v1.Namespace(name, metadata={"name": namespace}, opts=pulumi.ResourceOptions(parent=parent))


class InferencePath(pulumi.ComponentResource):
    def __init__(self, name: str, site: Site, master_key: pulumi.Input[str], teams: dict[str, pulumi.Resource],
                 opts: pulumi.ResourceOptions) -> None:
        """teams: the onboarded teams' components by team name (their namespaces receive the gateway keys)."""
        outputs = inference_outputs(site)
        super().__init__(INFERENCE_TYPE, name, outputs, opts)
        ns = _namespace(f"{name}-namespace", NAMESPACE, self)
        keda = release(f"{name}-keda", KEDA, KEDA_NAMESPACE, KEDA_VALUES, self,
                       [_namespace(f"{name}-keda-namespace", KEDA_NAMESPACE, self)], mirror=site.mirror)
        operator = release(f"{name}-database-operator", CLOUDNATIVE_PG, DATABASE_OPERATOR_NAMESPACE, {}, self,
                           [_namespace(f"{name}-database-operator-namespace", DATABASE_OPERATOR_NAMESPACE, self)],
                           mirror=site.mirror)
        database = release(f"{name}-database", CLOUDNATIVE_PG_CLUSTER, NAMESPACE, database_values(site), self,
                           [ns, operator], mirror=site.mirror, release_name=DATABASE_RELEASE)
        secret = kubernetes.core.v1.Secret(
            f"{name}-gateway-master-key", metadata={"name": MASTER_KEY_SECRET, "namespace": NAMESPACE},
            string_data={"master-key": master_key}, opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]))
        # The lending controller sets the lent models' replica floor on their autoscalers.
        for manifest in replica_floor_access(site, [scaled_object(b.name) for b in borrowers(site)]):
            rbac(f"{name}-{manifest['metadata']['name']}-{manifest['kind'].lower()}", manifest,
                 pulumi.ResourceOptions(parent=self, depends_on=[ns]))
        # The engines' key and the policies that admit only the gateway exist before any engine serves.
        key = engine_key_secret()
        key["stringData"] = {ENGINE_KEY_ENV: pulumi.Output.secret(master_key).apply(engine_key)}
        locks: list[pulumi.Resource] = [kubernetes.core.v1.Secret(
            f"{name}-engine-key", **fields(key), opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]))]
        locks += [kubernetes.networking.v1.NetworkPolicy(
            f"{name}-engine-ingress-{model.name}", **fields(engine_network_policy(model)),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns])) for model in site.inference.models]
        engines = release(f"{name}-model-servers", VLLM_STACK, NAMESPACE, vllm_values(site), self, [ns, keda, *locks],
                          mirror=site.mirror, release_name=ENGINE_RELEASE, timeout_s=ENGINE_RELEASE_TIMEOUT_S)
        gateway = release(f"{name}-gateway", LITELLM, NAMESPACE, gateway_values(site), self,
                          [ns, database, secret, engines], mirror=site.mirror,
                          release_name=GATEWAY_RELEASE)
        kubernetes.apiextensions.CustomResource(f"{name}-gateway-scrape", **custom(gateway_service_monitor()),
                                                opts=pulumi.ResourceOptions(parent=self, depends_on=[gateway]))
        kubernetes.apps.v1.DeploymentPatch(f"{name}-gateway-priority", **fields(gateway_priority_patch(site)),
                                           opts=pulumi.ResourceOptions(parent=self, depends_on=[gateway]))
        for team, component in teams.items():
            self._account(name, site, team, team_models(site, team), key_secret(TEAM_KEY_SECRET, team), master_key,
                          [gateway, component])
        # The operators' account exists from the first stage on, when no team does: the acceptance load's key.
        self._account(name, site, PLATFORM_ACCOUNT, platform_models(site), key_secret(PLATFORM_KEY_SECRET, NAMESPACE),
                      master_key, [gateway])
        self.register_outputs(outputs)

    def _account(self, name: str, site: Site, account: str, models: list[str], manifest: dict[str, Any],
                 master_key: pulumi.Input[str], after: list[pulumi.Resource]) -> None:
        """A gateway account (a team's, or the platform's): `gpuctl gateway` creates it on create and deletes it on
        delete, so rolling a team back removes its key; its key, a secret output, lands in `manifest`'s Secret."""
        gateway = site.inference.gateway
        url = shlex.quote(gateway.admin_url)
        allowed = " ".join(f"--model {shlex.quote(m)}" for m in models)
        ensure = (f"gpuctl gateway ensure-team --url {url} --team {account} "
                  f"--budget-usd {gateway.budget_of(account)!r} --budget-days {gateway.budget_days} {allowed}")
        created = command.local.Command(
            f"{name}-gateway-team-{account}",
            create=ensure, update=ensure, delete=f"gpuctl gateway remove-team --url {url} --team {account}",
            environment={"LITELLM_MASTER_KEY": master_key},
            # No triggers: a change of budget or models runs `update` in place. A replacement would create the new
            # account and then run the old one's delete, removing the team it had just updated.
            logging=command.local.Logging.STDERR,  # stdout is the key
            # `update` gets the last stdout as PULUMI_COMMAND_STDOUT: the key the team holds, which it keeps.
            add_previous_output_in_env=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=after, additional_secret_outputs=["stdout"]))
        manifest["stringData"] = {**manifest["stringData"], "api-key": created.stdout}
        kubernetes.core.v1.Secret(f"{name}-gateway-key-{account}", **fields(manifest),
                                  opts=pulumi.ResourceOptions(parent=self, depends_on=[created]))
