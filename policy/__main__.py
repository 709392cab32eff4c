"""The gpu-cluster policy pack. Constructing PolicyPack serves it over gRPC and never returns."""

import analyzer
import cooling
import hygiene
import isolation
import observability
import preemption
import storage
import teams
import wiring
from pulumi_policy import EnforcementLevel, PolicyPack
from pulumi_policy import policy as sdk

ALL_POLICIES = [*cooling.POLICIES, *observability.POLICIES, *wiring.POLICIES, *storage.POLICIES,
                *hygiene.POLICIES, *preemption.POLICIES, *teams.POLICIES, *isolation.POLICIES]

# PolicyPack serves the servicer it finds under this name: the SDK's, with the stack built once (analyzer.py).
sdk._PolicyAnalyzerServicer = analyzer.StackBuiltOnceServicer  # type: ignore[misc]
PolicyPack("gpu-cluster", enforcement_level=EnforcementLevel.MANDATORY, policies=ALL_POLICIES)
