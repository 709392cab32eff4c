"""The staged rollout runbook: canary -> half -> full, each advance soaked, gated, approved in Slack, deployed.

One module per concern: `machine` (the resumable steps), `gates` (Prometheus health), `approvals` (Slack
messages and decisions), `receivers` (Socket Mode and HTTP), `store` (SQLite state), `cli` (the `gpuctl rollout`
commands). The audit log, the stack lock and the deployer it shares with `gpuctl acceptance` are in runbooks/stack.
"""
