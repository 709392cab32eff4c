"""The staged rollout runbook: canary -> half -> full, each advance soaked, gated, approved in Slack, deployed.

One module per concern: `machine` (the resumable steps), `gates` (Prometheus health), `approvals` (Slack
messages and decisions), `receivers` (Socket Mode and HTTP), `deploy` (the Automation API), `store` (SQLite
state), `audit` (the hash-chained log), `cli` (the `gpuctl rollout` commands).
"""
