"""Alertmanager routing from the site spec: who hears about which alert, and which causes mute symptoms.

Pure. Critical alerts page on-call and post to the incident channel; tuning and warning alerts that
carry a `team` label (from the GPU's namespace or Slurm account, see `components.monitoring.alerts`) go to
that team's channel; everything else goes to the platform channel. Secrets are read by Alertmanager
from files under `alerting.secrets_dir`, never written into the config.
"""

from typing import Any

from components.monitoring.alerts import Severity, duration
from components.site.site import Site

ONCALL = "oncall"
INCIDENT = "slack-incident"
PLATFORM = "slack-platform"
HEARTBEAT = "heartbeat"
NULL = "null"
"""Receives what needs no one: the InfoInhibitor alert, whose only job is to inhibit."""

SLACK_API_URL_FILE = "slack-api-url"
"""File (under alerting.secrets_dir) holding the Slack incoming-webhook URL."""

ONCALL_TOKEN_FILE = "oncall-token"
"""File (under alerting.secrets_dir) holding the bearer token of the on-call webhook."""

HEARTBEAT_TOKEN_FILE = "heartbeat-token"
"""File (under alerting.secrets_dir) holding the bearer token of the dead-man's switch."""

PER_GPU = ["Hostname", "gpu"]
"""Labels that tie a symptom to the GPU whose cause inhibits it."""


def team_receiver(team: str) -> str:
    return f"slack-team-{team}"


def _slack(name: str, channel: str) -> dict[str, Any]:
    return {"name": name, "slack_configs": [{
        "channel": channel,
        "send_resolved": True,
        "title": '[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }}',
        "text": "{{ range .Alerts }}{{ .Annotations.summary }}\n{{ .Annotations.runbook_url }}\n{{ end }}",
    }]}


def receivers(site: Site) -> list[dict[str, Any]]:
    secrets = site.alerting.secrets_dir
    oncall = {"name": ONCALL, "webhook_configs": [{
        "url": site.alerting.oncall_webhook_url,
        "send_resolved": True,
        "http_config": {"authorization": {"type": "Bearer", "credentials_file": f"{secrets}/{ONCALL_TOKEN_FILE}"}},
    }]}
    heartbeat = {"name": HEARTBEAT, "webhook_configs": [{
        "url": site.alerting.heartbeat_url,
        "send_resolved": False,
        "http_config": {"authorization": {"type": "Bearer",
                                          "credentials_file": f"{secrets}/{HEARTBEAT_TOKEN_FILE}"}},
    }]}
    return [
        oncall,
        heartbeat,
        {"name": NULL},
        _slack(INCIDENT, site.slack.incident_channel),
        _slack(PLATFORM, site.alerting.platform_channel),
        *(_slack(team_receiver(t.name), t.slack_channel) for t in site.teams),
    ]


def routes(site: Site) -> list[dict[str, Any]]:
    critical = f'severity="{Severity.CRITICAL.value}"'
    owned = f'severity=~"{Severity.TUNING.value}|{Severity.WARNING.value}"'
    return [
        # Prometheus fires Watchdog always (kube-prometheus-stack's rules): each minute it reaches the dead-man's
        # switch, whose silence means the pipeline is down. Replacing the chart's config dropped its route to null,
        # so Watchdog fell to the platform channel every 4 h instead.
        {"receiver": HEARTBEAT, "matchers": ['alertname="Watchdog"'], "group_wait": "0s", "group_interval": "1m",
         "repeat_interval": "1m"},
        {"receiver": NULL, "matchers": ['alertname="InfoInhibitor"']},
        # continue: the page and the incident-channel post both go out.
        {"receiver": ONCALL, "matchers": [critical], "continue": True},
        {"receiver": INCIDENT, "matchers": [critical]},
        *({"receiver": team_receiver(t.name), "matchers": [owned, f'team="{t.name}"'],
           # A team reads its own tuning hints daily, not every 4 h.
           "repeat_interval": "24h"}
          for t in site.teams),
    ]


def inhibit_rules() -> list[dict[str, Any]]:
    return [
        # A silent or NotReady node explains every alert about its GPUs.
        {"source_matchers": ['alertname=~"DcgmExporterDown|KubernetesGpuNodeNotReady"'],
         "target_matchers": ['alertname!~"DcgmExporterDown|KubernetesGpuNodeNotReady"'],
         "equal": ["Hostname"]},
        # A failed GPU explains its throttling, idleness and the jobs it crashed.
        {"source_matchers": ['alertname="GpuXidHardwareError"'],
         "target_matchers": ['alertname=~"GpuThermalThrottling|GpuUtilizationLow|GpuXidApplicationError"'],
         "equal": PER_GPU},
        # The chart's info-alert inhibition, kept: an info alert is news only while nothing else fires in its
        # namespace (kube-prometheus-stack's InfoInhibitor).
        {"source_matchers": ['alertname="InfoInhibitor"'], "target_matchers": ['severity="info"'],
         "equal": ["namespace"]},
        # An overheating GPU throttles; the temperature alert is the one to act on.
        {"source_matchers": ['alertname=~"GpuTemperatureHigh|GpuHbmTemperatureHigh"'],
         "target_matchers": ['alertname="GpuThermalThrottling"'],
         "equal": PER_GPU},
    ]


def render_alertmanager_config(site: Site) -> dict[str, Any]:
    return {
        "global": {"slack_api_url_file": f"{site.alerting.secrets_dir}/{SLACK_API_URL_FILE}"},
        "route": {
            "receiver": PLATFORM,
            "group_by": ["alertname", "Hostname", "team"],
            "group_wait": duration(site.alerting.group_wait_s),
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": routes(site),
        },
        "receivers": receivers(site),
        "inhibit_rules": inhibit_rules(),
    }
