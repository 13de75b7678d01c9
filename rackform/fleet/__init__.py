"""Many sites from one repo: the rollout file, cross-site checks, rollouts in waves."""
