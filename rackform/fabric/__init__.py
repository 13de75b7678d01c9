"""The lossless RoCE fabric: `rackform fabric apply` and the fabric consistency check.

Switches are configured by the fabric stage (fabric.yml: the switch_baseline role on
Cumulus, the onyx_switch role on Onyx); `rackform fabric apply` runs that stage through
the pipeline's stage runner (`apply_cli`). `onyx_lines` loads the collection's
Onyx line model, the one copy. The rest reads live devices and compares both ends of
every link (`rackform fabric check`).
"""
