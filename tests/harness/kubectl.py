"""kubectl faked at its command line for the flex tests: every call recorded and answered as the cluster would."""

from collections.abc import Sequence
from dataclasses import dataclass, field

from runbooks.flex.lending import CommandError


@dataclass
class FakeKubectl:
    """Records kubectl calls; `drain` fails while `pdb_blocks` (a PodDisruptionBudget holding pods)."""

    calls: list[list[str]] = field(default_factory=list)
    labelled: set[str] = field(default_factory=set)
    pdb_blocks: bool = False

    def __call__(self, args: Sequence[str], timeout_s: float = 30) -> str:
        call = list(args)
        self.calls.append(call)
        if call[1:3] == ["label", "node"]:
            (self.labelled.add if call[4].endswith("=true") else self.labelled.discard)(call[3])
        if call[1] == "drain" and self.pdb_blocks:
            raise CommandError(f"{' '.join(call)} exited 1: Cannot evict pod as it would violate the pod's "
                               "disruption budget")
        if call[1] == "get":
            return "".join(f"node/{node}\n" for node in sorted(self.labelled))
        return ""
