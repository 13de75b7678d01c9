"""Emitters: a checked site -> the standalone Ansible project under build/<site>/.

files = render_files(site)             # pure, in memory, deterministic
result = write_project(files, out_dir) # atomic swap; result.changed lists differences
stage_digest(files, "fabric")          # what the Pulumi Playbook resource compares
"""

from rackform.render.digest import stage_digest, stage_files
from rackform.render.project import render_files, render_project
from rackform.render.writer import WriteResult, write_project

__all__ = ["render_files", "write_project", "stage_digest", "stage_files", "render_project", "WriteResult"]
