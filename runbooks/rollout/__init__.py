"""The staged rollout runbook: canary -> half -> full, each advance soaked, gated, approved in Slack, deployed.

One module per concern: `machine` (the resumable steps), `gates` (Prometheus health), `approvals` (Slack
messages and decisions), `receivers` (Socket Mode and HTTP), `deploy` (the Automation API), `store` (SQLite
state), `audit` (the log chained under a secret key), `lock` (one command per stack at a time), `cli` (the
`gpuctl rollout` commands).
"""
