"""SSH host key checking stays on outside a lab-only site: `validate` refuses every way the
inventory can turn it off (file:line, and the command that records the keys instead), a
`lab_only: true` site may, and a new site from `init` or `new-site` is a real one, checking on."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackform.checks.host_keys import checking_off, host_key_checking
from rackform.cli import main
from rackform.commands.init import write_repo
from rackform.model.loader import load_site
from rackform.render.known_hosts import host_key_checking as rendered_checking
from rackform.site_scaffold import real_site_vars

EXIT_OK, EXIT_BAD_INPUT = 0, 2
SITE = "reference"  # a shipped site that stands for a real one: not lab-only, checking on
ALL_VARS = f"inventories/{SITE}/group_vars/all.yml"
LAB_ONLY_LINE = "lab_only: true  # only `rackform lab up`'s machines"
SHIPPED = ("lab", "edge", "campus", "reference")
NEW_PREFIXES = ["--management-prefix", "10.60.0.0/24", "--oob-prefix", "10.60.1.0/24"]


def validate(root: Path, site: str = SITE) -> int:
    return main(["validate", site, "--root", str(root)])


def append(lab_files, relative: str, text: str) -> int:
    """Append `text` to a file of the copy; the 1-based line its first line lands on."""
    before = lab_files.read(relative)
    lab_files.write(relative, before + text)
    return before.count("\n") + 1


# ---------------------------------------------------------------- refused outside a lab-only site


@pytest.mark.parametrize("value", ["false", "False", "no", '"no"', "off", "0", "n", '"f"', "maybe", '"{{ checking }}"'])
def test_validate_refuses_checking_off_in_a_real_site_at_its_line(lab_files, capsys, value):
    line = append(lab_files, ALL_VARS, f"ansible_host_key_checking: {value}\n")

    assert validate(lab_files.root) == EXIT_BAD_INPUT

    err = capsys.readouterr().err
    assert f"{ALL_VARS}:{line}: error: all.ansible_host_key_checking: " in err
    assert f"`rackform ssh-keys {SITE} --collect`" in err and "lab_only: true" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("file, key_path, text", [
    (f"inventories/{SITE}/host_vars/dgx2-1.yml", "dgx2-1.ansible_ssh_host_key_checking",
     "ansible_ssh_host_key_checking: false\n"),
    (f"inventories/{SITE}/host_vars/dgx2-1.yml", "dgx2-1.ansible_ssh_common_args",
     'ansible_ssh_common_args: "-o StrictHostKeyChecking=no"\n'),
    (ALL_VARS, "all.ansible_ssh_extra_args", "ansible_ssh_extra_args: -o 'StrictHostKeyChecking accept-new'\n"),
    (ALL_VARS, "all.ansible_ssh_args", "ansible_ssh_args: -C -o UserKnownHostsFile=/dev/null\n"),
    (f"inventories/{SITE}/group_vars/leaf.yml", "leaf.ansible_paramiko_host_key_checking",
     "ansible_paramiko_host_key_checking: no\n"),
])
def test_every_spelling_of_checking_off_is_refused_where_it_is_written(lab_files, capsys, file, key_path, text):
    line = append(lab_files, file, text) if lab_files.path(file).exists() else (lab_files.write(file, text) or 1)

    assert validate(lab_files.root) == EXIT_BAD_INPUT

    assert f"{file}:{line}: error: {key_path}: " in capsys.readouterr().err


def test_checking_off_inline_in_hosts_yml_is_refused(lab_files, capsys):
    hosts = f"inventories/{SITE}/hosts.yml"
    lab_files.write(hosts, lab_files.read(hosts).replace("    dgx2-2:\n", "    dgx2-2:\n      ansible_host_key_checking: false\n"))

    assert validate(lab_files.root) == EXIT_BAD_INPUT

    assert "error: dgx2-2.ansible_host_key_checking: " in capsys.readouterr().err


@pytest.mark.parametrize("text", ["ansible_host_key_checking: true\n", "ansible_host_key_checking: yes\n",
                                  'ansible_host_key_checking: "True"\n',
                                  'ansible_ssh_common_args: "-o StrictHostKeyChecking=yes -o ServerAliveInterval=30"\n'])
def test_checking_on_said_outright_is_accepted(lab_files, text):
    append(lab_files, ALL_VARS, text)

    assert validate(lab_files.root) == EXIT_OK


def test_the_lab_site_without_its_marker_is_refused(lab_files, capsys):
    lab_files.edit_site(LAB_ONLY_LINE, "# lab_only: true  # left out")

    assert validate(lab_files.root, "lab") == EXIT_BAD_INPUT

    assert "inventories/lab/group_vars/all.yml:10: error: all.ansible_host_key_checking: " in capsys.readouterr().err


# ---------------------------------------------------------------- a lab-only site may


def test_a_lab_only_site_may_turn_checking_off(lab_files):
    lab_files.edit_site("power_basis: typical\n", "power_basis: typical\nlab_only: true\n", site=SITE)
    append(lab_files, ALL_VARS, "ansible_host_key_checking: false\n")
    append(lab_files, f"inventories/{SITE}/host_vars/dgx2-1.yml", 'ansible_ssh_common_args: "-o StrictHostKeyChecking=no"\n')

    assert validate(lab_files.root) == EXIT_OK
    assert list(host_key_checking(lab_files.load(SITE))) == []


@pytest.mark.parametrize("site", SHIPPED)
def test_every_shipped_site_is_lab_only_or_keeps_checking_on(repo_root, site):
    loaded = load_site(site, repo_root)

    assert loaded.lab_only == (site in ("lab", "edge"))
    assert loaded.lab_only or rendered_checking(loaded)
    assert list(host_key_checking(loaded)) == []


def test_lab_only_is_the_site_files_own_not_a_profiles(lab_files, capsys):
    append(lab_files, "topologies/profiles/kubernetes.yaml", "lab_only: true\n")

    assert validate(lab_files.root) == EXIT_BAD_INPUT

    assert "topologies/profiles/kubernetes.yaml:" in capsys.readouterr().err


def test_lab_only_takes_a_boolean_only(lab_files, capsys):
    lab_files.edit_site(LAB_ONLY_LINE, 'lab_only: "true"  # a string, not a yes')

    assert validate(lab_files.root, "lab") == EXIT_BAD_INPUT

    assert "topologies/sites/lab.yaml:7: lab_only: " in capsys.readouterr().err


# ---------------------------------------------------------------- new sites are real sites


@pytest.mark.parametrize("example", SHIPPED)
def test_init_gives_a_real_site_that_validates_with_checking_on(tmp_path, capsys, example):
    write_repo(tmp_path, example)

    assert validate(tmp_path, example) == EXIT_OK
    site = load_site(example, tmp_path)
    assert not site.lab_only and rendered_checking(site)
    assert "lab_only" not in (tmp_path / "topologies" / "sites" / f"{example}.yaml").read_text()


def test_init_from_edge_says_why_checking_is_on_where_the_lab_turned_it_off(tmp_path):
    write_repo(tmp_path, "edge")

    text = (tmp_path / "inventories/edge/group_vars/all.yml").read_text()
    assert "ansible_host_key_checking" not in text.replace("# Host key checking is on: ansible_host_key_checking", "")
    assert "Lab only" not in text and "`rackform ssh-keys edge --collect`" in text
    assert "domain: edge.rackform.test\n" in text  # the rest as it was


@pytest.mark.parametrize("source", ["edge", "lab"])
def test_new_site_from_a_lab_is_a_real_site_with_checking_on(lab_files, capsys, source):
    code = main(["new-site", "branch", "--from", source, "--root", str(lab_files.root), *NEW_PREFIXES,
                 "--fabric-prefix", "compute=10.70.0.0/16"])

    assert code == EXIT_OK
    assert "`rackform ssh-keys branch --collect`" in capsys.readouterr().out
    branch = load_site("branch", lab_files.root)
    assert not branch.lab_only and rendered_checking(branch)
    assert validate(lab_files.root, "branch") == EXIT_OK


def test_new_site_leaves_out_every_setting_that_turns_checking_off(lab_files):
    append(lab_files, "inventories/edge/group_vars/all.yml",
           '# for the lab\nansible_ssh_common_args: "-o StrictHostKeyChecking=no"\nhttp_proxy: "http://proxy:3128"\n')

    assert main(["new-site", "branch", "--from", "edge", "--root", str(lab_files.root), *NEW_PREFIXES]) == EXIT_OK

    text = lab_files.read("inventories/branch/group_vars/all.yml")
    assert "StrictHostKeyChecking" not in text and "for the lab" not in text
    assert 'http_proxy: "http://proxy:3128"\n' in text


# ---------------------------------------------------------------- the parts


def test_real_site_vars_keeps_what_does_not_turn_checking_off():
    text = "# header\nansible_user: root\n# why\nansible_host_key_checking: false\nntp_servers:\n  - 10.0.0.1\n"

    result = real_site_vars(text, "all.yml", "new", "old")

    assert result.startswith("# header\nansible_user: root\n# Host key checking is on: ")
    assert result.endswith("ntp_servers:\n  - 10.0.0.1\n") and "# why" not in result


@pytest.mark.parametrize("key, value, off", [
    ("ansible_host_key_checking", True, False), ("ansible_host_key_checking", "on", False),
    ("ansible_host_key_checking", 1, False), ("ansible_host_key_checking", False, True),
    ("ansible_host_key_checking", None, True), ("ansible_host_key_checking", ["no"], True),
    ("ansible_libssh_host_key_checking", "OFF", True),
    ("ansible_ssh_common_args", "-oStrictHostKeyChecking=No", True),
    ("ansible_ssh_common_args", "-o StrictHostKeyChecking=yes", False),
    ("ansible_sftp_extra_args", "-o UserKnownHostsFile=/dev/null", True),
    ("ansible_user", "no", False),
])
def test_checking_off_reads_values_as_ansible_does(key, value, off):
    assert bool(checking_off(key, value)) is off
