"""The gpu-cluster policy pack. Constructing PolicyPack serves it over gRPC and never returns."""

import analyzer
import pack
from pulumi_policy import EnforcementLevel, PolicyPack
from pulumi_policy import policy as sdk

# PolicyPack serves the servicer it finds under this name: the SDK's, with the stack built once (analyzer.py).
sdk._PolicyAnalyzerServicer = analyzer.StackBuiltOnceServicer  # type: ignore[misc]
PolicyPack("gpu-cluster", enforcement_level=EnforcementLevel.MANDATORY, policies=pack.all_policies())
