"""`gpuctl acceptance`: the campaign (soak, shock, drills) that must pass before any team is onboarded."""
