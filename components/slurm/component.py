"""Slurm beside Kubernetes, installed and configured with pulumi-command over SSH from the site spec.

Every host installs Slurm at slurm.package_version from slurm.package_source and gets the MUNGE key, the secret
munge_key, on its command's stdin. The controller gets slurm.conf, gres.conf, cgroup.conf and slurmdbd.conf, the
accounting database in MariaDB, and the Slurm exporter with its unit; its command carries their content, so the
daemons restart (and `scontrol reconfigure` pushes the change) only when it changes, and fails unless slurmctld
answers `scontrol ping` and slurmdbd `sacctmgr show cluster`.
Nodes run configless (slurm.conf(5) SlurmctldParameters=enable_configless; slurmd --conf-server):
they fetch the files from slurmctld, so no node holds a copy that can drift and a node's command
stays the same size however many nodes the site has. 22.05 does not ship the Prolog and Epilog, so
each node's one command installs them and the mount units of the hot and cold tiers (at the spec's mount points);
the checkpoint mover they start is copied beside it by reference. The command then waits until slurmctld hears
from the node's slurmd, and drains the node with the node check's reason (`sinfo -R` shows it), so Slurm schedules
nothing on it, or resumes a validated node.
Accounting (QoS and team accounts) is applied on the controller with idempotent sacctmgr calls.
"""

import pulumi
import pulumi_command as command

from components.facility.admission import Verdict
from components.facility.component import GpuNode
from components.site.site import Site
from components.site.wellknown import SLURM_TYPE
from components.slurm.conf import (
    accounting_script,
    slurm_nodes,
)
from components.slurm.install import (
    MOVER_COPY,
    _digest,
    controller_command,
    controller_files,
    install_script,
    node_command,
    node_files,
    slurm_facts,
)
from components.slurm.release import release, release_command
from hosts import CHECKPOINT_MOVER_ASSET


class Slurm(pulumi.ComponentResource):
    def __init__(self, name: str, site: Site, ssh_private_key: pulumi.Output[str], munge_key: pulumi.Output[str],
                 nodes: list[GpuNode], opts: pulumi.ResourceOptions) -> None:
        facts = slurm_facts(site)
        super().__init__(SLURM_TYPE, name, facts, opts)
        on_controller, on_nodes = controller_files(site), node_files(site)

        def connection(host: str) -> command.remote.ConnectionArgs:
            return command.remote.ConnectionArgs(host=host, user=site.ssh_user, private_key=ssh_private_key)

        # Every host reads the MUNGE key on stdin: a secret input, never part of the script nor of a file it lists.
        key = munge_key.apply(lambda text: f"{text}\n")
        controller = connection(site.slurm.controller_host)
        configured = command.remote.Command(
            f"{name}-controller-config", connection=controller,
            create=install_script(on_controller, controller_command(site)), stdin=key,
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
            reach = connection(node.ssh_host)
            # The mover goes by reference (the engine hashes the file), so each node's command stays a few kB.
            mover = command.remote.CopyToRemote(
                f"{name}-{node.name}-mover", connection=reach, source=pulumi.FileAsset(CHECKPOINT_MOVER_ASSET),
                remote_path=MOVER_COPY, opts=pulumi.ResourceOptions(parent=self),
            )

            def script(verdict: Verdict, node_name: str = node.name) -> str:
                return install_script(on_nodes, node_command(site, node_name, verdict))

            command.remote.Command(
                f"{name}-{node.name}-config", connection=reach, create=by_name[node.name].verdict.apply(script),
                stdin=key, triggers=[_digest(on_nodes)],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[configured, mover]),
            )
        self.register_outputs(facts)


