"""The inference path: vLLM model servers on the Kubernetes pool, scaled on their queues, behind the metered LLM
gateway (values.py renders the charts' values; component.py installs them)."""
