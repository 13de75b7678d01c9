"""Emitters: a checked site -> the standalone Ansible project under build/<site>/.

A plain package: nothing is imported here, so `import rackform.render.yamltext` loads only
what that module needs. Callers import from the module that does the work:

files = project.render_files(site)           # pure, in memory, deterministic
result = writer.write_project(files, out)    # atomic swap; result.changed lists differences
digest.stage_digest(files, "fabric")         # what the Pulumi Playbook resource compares
project.render_project(site, out)            # both of the first two, as `rackform render` does
"""
