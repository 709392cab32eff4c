"""The gpu-cluster program: read the site from config, fail early on a bad spec, build the one stack."""

import pulumi
from pulumi.runtime.config import CONFIG, get_config_env, is_config_secret

from components.cluster import GpuCluster
from components.problems import SiteSpecError
from components.site_config import parse_site


def project_config() -> tuple[dict[str, str], set[str]]:
    """This project's config keys, without their namespace, and which of them are secret."""
    prefix = f"{pulumi.get_project()}:"
    values = {k[len(prefix):]: v for k, v in {**get_config_env(), **CONFIG.get()}.items() if k.startswith(prefix)}
    return values, {key for key in values if is_config_secret(prefix + key)}


try:
    site = parse_site(*project_config())
except SiteSpecError as err:
    raise pulumi.RunError(str(err)) from None

cluster = GpuCluster(pulumi.get_stack(), site)
pulumi.export("gpu_count", cluster.gpu_count)
pulumi.export("stage", site.stage)
