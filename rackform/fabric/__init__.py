"""The lossless RoCE fabric: switch configuration drivers and the fabric consistency check.

A driver per switch OS (`rackform.fabric.drivers`) renders a switch's configuration
from the site, reads what the switch runs, shows the difference, applies it with a
rollback and saves it. The same drivers back `rackform fabric apply` and the Pulumi
`SwitchConfig` resource.
"""
