"""Dynamic providers of the rackform stack (run by Pulumi in their own process)."""
