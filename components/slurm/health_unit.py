"""The node health controller's systemd unit on the Slurm controller: `gpuctl health control` from the release the
stack installs for the lending controller (components/slurm/release.py), beside it. Pure: no pulumi."""

from components.site.site import Site

HEALTH_UNIT = "gpucluster-health-controller.service"
"""The node health controller (`gpuctl health control`, runbooks/health/controller.py) on the Slurm controller."""


def render_health_unit(site: Site, stack: str) -> str:
    """systemd.service(5) unit running the health controller. It runs as root: `scontrol update` of a node needs
    SlurmUser or root, and the lending controller's moves lock is root's; kubectl authenticates with health.kubeconfig
    and ssh with health.ssh_key."""
    health, current = site.health, f"{site.lending.project_dir}/current"
    return "\n".join([
        "# Generated from the site spec by gpu-cluster: edit Pulumi.<stack>.yaml.",
        "[Unit]", "Description=Drains, diagnoses and returns GPU nodes on their DCGM signals (gpu-cluster)",
        "Wants=network-online.target", "After=network-online.target slurmctld.service", "",
        "[Service]",
        f"Environment=KUBECONFIG={health.kubeconfig}",
        f"ExecStart={current}/.venv/bin/gpuctl health --project-dir {current} --stack {stack} control "
        f"--port {health.metrics_port}",
        # A crash mid-move is finished by the next start: the schedulers say which nodes are the controller's.
        "Restart=always", "RestartSec=10", "",
        "[Install]", "WantedBy=multi-user.target", "",
    ])
