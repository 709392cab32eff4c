"""A drill package as runbooks/acceptance/drills/ is one: the registry walks it the same way (test_registry.py)."""
