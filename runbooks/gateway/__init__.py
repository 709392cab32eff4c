"""`gpuctl gateway`: a team's account on the LLM gateway (team, budget, key), created when the team is onboarded and
removed when it is rolled back; `pulumi up` runs it (components/inference/component.py)."""
