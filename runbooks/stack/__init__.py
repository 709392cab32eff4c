"""What every command that changes a stack shares (rollout, acceptance): `audit` (the log chained under a secret
key, which every such command writes), `lock` (one command per stack at a time), `deploy` (the Automation API).
"""
