"""The gpu-cluster program: read the site from config, fail early on a bad spec, build the one stack."""

import gc

import pulumi
import pulumi_kubernetes as kubernetes
from pulumi.runtime.config import CONFIG, get_config_env, get_config_secret_keys_env, is_config_secret

from components.cluster import GpuCluster
from components.facility.component import NodeAdmission
from components.site.problems import SiteSpecError
from components.validate import parse_site

# Everything the run registers lives until it ends, so the cyclic collector's passes over it free almost nothing
# and took 58-72 % of the CPU at 1,024-8,192 GPUs (issue 22): what the imports made is frozen and the run does
# without collection. Under the CLI the language host exits when the run ends; the offline engine
# (runbooks/offline/engine.py) runs the program the same way and turns collection back on after it.
gc.freeze()
gc.disable()


def project_config() -> tuple[dict[str, str], set[str]]:
    """This project's config keys, without their namespace, and which of them are secret."""
    prefix = f"{pulumi.get_project()}:"
    values = {k[len(prefix):]: v for k, v in {**get_config_env(), **CONFIG.get()}.items() if k.startswith(prefix)}
    # The language host hands secret keys over in PULUMI_CONFIG_SECRET_KEYS or through set_all_config.
    env_secrets = set(get_config_secret_keys_env())
    return values, {key for key in values if is_config_secret(prefix + key) or prefix + key in env_secrets}


try:
    site = parse_site(*project_config())
except SiteSpecError as err:
    raise pulumi.RunError(str(err)) from None

# One Kubernetes provider for the whole stack, from the operator's kubeconfig (KUBECONFIG / context);
# every Kubernetes resource under the cluster inherits it.
k8s = kubernetes.Provider("k8s")
config = pulumi.Config()
admission = NodeAdmission(site, config.require_secret("ssh_private_key"), config.require_secret("bmc_password"))
cluster = GpuCluster(pulumi.get_stack(), admission, config.require_secret("llm_gateway_master_key"),
                     config.require_secret("munge_key"), pulumi.ResourceOptions(providers=[k8s]))
pulumi.export("gpu_count", cluster.gpu_count)
pulumi.export("stage", site.stage)
