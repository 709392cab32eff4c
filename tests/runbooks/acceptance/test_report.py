"""The report puts the lending controller's moves on the campaign's timeline: each lend and reclaim its counters show
rising, at its time and in its step, marked on the plots; a restarted controller's counters falling to 0 are no
move."""

from pathlib import Path

from runbooks.acceptance.report import write_report
from runbooks.acceptance.store import RUNNING, Campaign, CampaignStore


def test_should_show_each_lend_and_reclaim_in_the_step_it_fell_in(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path / "acceptance.sqlite")
    campaign = Campaign("campaign-1", "sha256:deployed", "platform", 0.01, 1000.0, RUNNING, None, None)
    store.add_campaign(campaign)
    for step, begin, end in (("peak", 1000.0, 1010.0), ("shock", 1010.0, 1020.0),
                             ("soak", 1020.0, 1030.0)):
        store.step_started(campaign.id, step, begin)
        store.step_finished(campaign.id, step, end, {"ran_s": end - begin})
    # Looks every 2 s, each answered: a lend in the shock (a node lent by the next look), the controller restarted in
    # the soak, then a reclaim. The renderer shows a move counter first when it counts its first move: the lend's
    # shows at 1012, the restarted controller's at 1022, at 0 (its reclaim counter too, until it reclaims).
    looks = (1008.0, 1012.0, 1014.0, 1022.0, 1024.0, 1026.0)
    store.add_samples(campaign.id, "lending_decision_age_s", [(at, 1.0) for at in looks])
    store.add_samples(campaign.id, "lending_lends", [(1012.0, 1), (1014.0, 1), (1022.0, 0), (1024.0, 0)])
    store.add_samples(campaign.id, "lending_reclaims", [(1026.0, 1)])
    store.add_samples(campaign.id, "lending_nodes_lent", [(1012.0, 0), (1014.0, 1), (1024.0, 1), (1026.0, 0)])
    report = write_report(store, campaign, tmp_path / "report")
    text = report.read_text()
    section = text.split("## Lending controller\n\n", 1)[1].split("\n\n", 1)[0]
    assert section.splitlines() == ["- lend at 12.0 s (shock)", "- reclaim at 26.0 s (soak)"]
    assert "(panels with samples: lending_nodes_lent)" in text
    assert (tmp_path / "report" / "report.png").stat().st_size > 10_000


def test_should_say_when_the_controller_moved_nothing(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path / "acceptance.sqlite")
    campaign = Campaign("campaign-1", "sha256:deployed", "platform", 0.01, 1000.0, RUNNING, None, None)
    store.add_campaign(campaign)
    store.add_samples(campaign.id, "lending_lends", [(1008.0, 0), (1012.0, 0)])
    assert "## Lending controller\n\n- no lend or reclaim started\n" in write_report(
        store, campaign, tmp_path / "report").read_text()
