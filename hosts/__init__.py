"""Programs that run on the cluster's hosts, not in the Pulumi program: standard library only, and nothing of the
project. Components ship them (copied over SSH, put in a ConfigMap) from the paths named here, so that edge is an
import the layering contracts see. The paths they are installed at on hosts are the components' own."""

from pathlib import Path

_HERE = Path(__file__).resolve().parent
NODE_CHECK = _HERE / "node_check.py"
NODE_CHECK_ASSET = "hosts/node_check.py"
"""The node check as a Pulumi FileAsset names it: relative to the project directory."""
SLURM_EXPORTER = _HERE / "slurm_exporter.py"
CHECKPOINT_MOVER = _HERE / "checkpoint_mover.py"
CHECKPOINT_MOVER_ASSET = "hosts/checkpoint_mover.py"
"""The mover as a Pulumi FileAsset names it: each Slurm node gets it by reference, not inside a command."""
