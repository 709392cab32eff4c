"""What fires during a campaign: Alertmanager's active alerts, and the SOP in docs/sop/ each one names.

Every alert links `<runbook_base_url>/<alert-kebab>.md` (components/monitoring/alerts.py); the campaign holds the link
to a file that exists and has every section an on-call needs (SOP_SECTIONS, each with a body): an empty file is no
SOP. An alert that fires with no SOP fails the campaign.
"""

import json
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from components.monitoring.alerts import kebab

TIMEOUT_S = 5.0
"""s one Alertmanager query may take."""
SOP_SECTIONS = ("Detection", "Impact", "Immediate action", "Recovery", "Escalation")
"""`## ` headings every SOP has, each with text under it: how the failure shows, what it costs, what to do first, how
to get back, whom to call."""


class AlertmanagerError(Exception):
    """Alertmanager could not be read; the message names the URL."""


@dataclass(frozen=True)
class FiringAlert:
    name: str
    fingerprint: str
    starts_at: str
    labels: dict[str, str]


def firing_alerts(url: str) -> list[FiringAlert]:
    """Active alerts, silenced and inhibited ones included: a silence hides an alert from people, not from the
    campaign (Alertmanager API v2, GET /api/v2/alerts)."""
    query = urllib.parse.urlencode({"active": "true", "silenced": "true", "inhibited": "true"})
    try:
        with urllib.request.urlopen(f"{url}/api/v2/alerts?{query}", timeout=TIMEOUT_S) as response:
            body = json.load(response)
    except (OSError, ValueError) as error:
        raise AlertmanagerError(f"cannot read {url}/api/v2/alerts: {error}") from None
    return [FiringAlert(str(a["labels"].get("alertname", "")), str(a["fingerprint"]), str(a["startsAt"]),
                        {str(k): str(v) for k, v in a["labels"].items()})
            for a in body if a.get("status", {}).get("state") == "active"]


def sop_missing(sop: str, sop_dir: Path) -> str | None:
    """What docs/sop/<sop>.md lacks to count as an SOP (the file, or sections with a body), or None."""
    path = sop_dir / f"{sop}.md"
    if not path.is_file():
        return f"docs/sop/{sop}.md does not exist"
    bodies = {heading.strip(): body.strip()
              for heading, body in re.findall(r"^## (.+)$\n((?:(?!^## ).*\n?)*)", path.read_text(), flags=re.M)}
    empty = [name for name in SOP_SECTIONS if not bodies.get(name)]
    return f"docs/sop/{sop}.md lacks the sections {', '.join(empty)}" if empty else None


def alert_sop(alert: str, sop_dir: Path) -> str | None:
    """The SOP the alert links to, when docs/sop/ has it with its sections; None: the alert has no SOP."""
    sop = kebab(alert)
    return sop if sop_missing(sop, sop_dir) is None else None
