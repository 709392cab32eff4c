"""Each team's NFS share: which server, which class."""

from typing import Any

from components.storage.tiers import nfs_storage_class, team_shares
from tests.builders import parse, with_changes


def test_should_spread_team_shares_over_the_nfs_servers(prod: dict[str, Any]) -> None:
    shares = team_shares(parse(with_changes(prod, stage="full")))
    servers = {s.server for s in shares}
    assert len(shares) == 12 and servers == {"nfs-hot-01.dc1.internal", "nfs-hot-02.dc1.internal"}
    assert [s.share for s in shares[:2]] == ["/exports/nlp-foundation", "/exports/speech"]


def test_should_give_each_team_its_own_nfs_class(prod: dict[str, Any]) -> None:
    cls = nfs_storage_class(team_shares(parse(with_changes(prod, stage="canary")))[1])
    assert cls["metadata"] == {"name": "nfs-hot-speech", "labels": {"gpucluster.io/team": "speech"}}
    assert cls["provisioner"] == "nfs.csi.k8s.io"
    assert cls["parameters"] == {"server": "nfs-hot-02.dc1.internal", "share": "/exports/speech"}
    assert cls["reclaimPolicy"] == "Retain"
