"""Slurm beside Kubernetes, deployed with pulumi-command over SSH from the rendered configuration.

The controller gets slurm.conf, gres.conf, cgroup.conf and slurmdbd.conf, and the Slurm exporter with its unit;
its command carries their content, so the daemons restart (and `scontrol reconfigure` pushes the change) only
when it changes.
Nodes run configless (slurm.conf(5) SlurmctldParameters=enable_configless; slurmd --conf-server):
they fetch the files from slurmctld, so no node holds a copy that can drift and a node's command
stays the same size however many nodes the site has. 22.05 does not ship the Prolog and Epilog, so
each node's command installs them, the checkpoint mover they start, and the mount units of the hot
and cold tiers (at the spec's mount points).
Accounting (QoS and team accounts) is applied on the controller with idempotent sacctmgr calls. A
node the node check failed is drained with the check's reason (`sinfo -R` shows it), so Slurm
schedules nothing on it; a validated node is resumed.
"""

import functools

import pulumi
import pulumi_command as command

from components.facility.component import GpuNode
from components.slurm.conf import (
    accounting_script,
    slurm_nodes,
)
from components.slurm.install import (
    CONTROLLER_RESTART,
    _digest,
    admission_command,
    controller_files,
    install_script,
    node_command,
    node_files,
    slurm_facts,
)
from components.slurm.release import release, release_command
from components.spec.site import Site
from components.spec.wellknown import SLURM_TYPE


class Slurm(pulumi.ComponentResource):
    def __init__(self, name: str, site: Site, ssh_private_key: pulumi.Output[str], nodes: list[GpuNode],
                 opts: pulumi.ResourceOptions) -> None:
        facts = slurm_facts(site)
        super().__init__(SLURM_TYPE, name, facts, opts)
        on_controller, on_nodes = controller_files(site), node_files(site)

        def connection(host: str) -> command.remote.ConnectionArgs:
            return command.remote.ConnectionArgs(host=host, user=site.ssh_user, private_key=ssh_private_key)

        controller = connection(site.slurm.controller_host)
        configured = command.remote.Command(
            f"{name}-controller-config", connection=controller,
            create=install_script(on_controller, CONTROLLER_RESTART),
            triggers=[_digest(on_controller)], opts=pulumi.ResourceOptions(parent=self),
        )
        command.remote.Command(
            f"{name}-accounting", connection=controller, create=accounting_script(site),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[configured]),
        )
        shipped = release(pulumi.get_stack())
        command.remote.Command(
            f"{name}-lending-controller", connection=controller,
            create=release_command(site, pulumi.get_stack(), shipped.digest), stdin=shipped.archive,
            triggers=[shipped.digest], opts=pulumi.ResourceOptions(parent=self, depends_on=[configured]),
        )
        by_name = {node.node_name: node for node in nodes}
        for node in slurm_nodes(site):
            installed = command.remote.Command(
                f"{name}-{node.name}-config", connection=connection(node.ssh_host),
                create=install_script(on_nodes, node_command(site)),
                triggers=[_digest(on_nodes)],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[configured]),
            )
            command.remote.Command(
                f"{name}-{node.name}-admission", connection=controller,
                create=by_name[node.name].verdict.apply(functools.partial(admission_command, node.name)),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[installed]),
            )
        self.register_outputs(facts)


