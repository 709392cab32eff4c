"""The gpu-cluster policy pack. Constructing PolicyPack serves it over gRPC and never returns."""

import cooling
import hygiene
import isolation
import observability
import preemption
import storage
import teams
import wiring
from pulumi_policy import EnforcementLevel, PolicyPack

ALL_POLICIES = [*cooling.POLICIES, *observability.POLICIES, *wiring.POLICIES, *storage.POLICIES,
                *hygiene.POLICIES, *preemption.POLICIES, *teams.POLICIES, *isolation.POLICIES]

PolicyPack("gpu-cluster", enforcement_level=EnforcementLevel.MANDATORY, policies=ALL_POLICIES)
