"""rackform.render.digest's shortcuts (the project's paths sorted once per render, a variable
file's keys taken name by name) pick the same paths and read the same keys as a plain version:
every path tested for each stage, every key of every file in each round."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rackform.pipeline import STAGE_NAMES, load_and_check
from rackform.render import digest
from rackform.render.digest import (_CLOSURE_ROUNDS, _CODE_SUFFIXES, _DIRECTORY_STAGES, _FILTERS, _MODULE_UTILS,
                                    _MODULES, _ROLES, _SWITCH_CONFIG_STAGES, INVENTORY, _inventory_index,
                                    _is_var_file, _plays, _plugin_names, _targets, _var_file, _with_dependencies,
                                    _words, playbook_of, stage_contents, stage_files)
from rackform.collection import PROJECT_DIR
from rackform.render.project import render_files
from rackform.role_code import module_utils_imports

REPO = Path(__file__).resolve().parents[2]
SHIPPED_SITES = sorted(path.stem for path in (REPO / "topologies" / "sites").glob("*.yaml"))


def plain_plugin_files(roles, files):
    named = set()
    for path, content in files.items():
        if path.startswith(_ROLES) and path[len(_ROLES):].split("/", 1)[0] in roles:
            named |= _plugin_names(content)
    found = {f"{_MODULES}{name}.py" for name in named} & files.keys()
    found |= {path for path in files if path.startswith(_FILTERS) and named & _words(files[path])}
    pending = [path for path in found if path.startswith(_MODULES)]
    while pending:
        for name in module_utils_imports(files[pending.pop()].decode()):
            path = f"{_MODULE_UTILS}{name}.py"
            if path in files and path not in found:
                found.add(path)
                pending.append(path)
    return found


def plain_stage_files(files, stage):
    if stage in _DIRECTORY_STAGES:
        return sorted(path for path in files if path.startswith(_DIRECTORY_STAGES[stage]))
    playbook = playbook_of(stage)
    patterns, roles = _plays(files[playbook])
    roles = _with_dependencies(roles, files)
    groups_of, hosts_of = _inventory_index(files.get(INVENTORY, b""))
    targets = _targets(patterns, groups_of, hosts_of)
    groups = {"all"}.union(*(groups_of[host] for host in targets))
    plugins = plain_plugin_files(roles, files)

    def wanted(path):
        if path.startswith(PROJECT_DIR):
            return path in plugins or (path.startswith(_ROLES) and path[len(_ROLES):].split("/", 1)[0] in roles)
        parts = path.split("/")
        if parts[:2] == ["inventory", "group_vars"] and len(parts) > 2:
            return parts[2].removesuffix(".yml").removesuffix(".yaml") in groups
        if parts[:2] == ["inventory", "host_vars"] and len(parts) > 2:
            return parts[2].removesuffix(".yml").removesuffix(".yaml") in targets
        if parts[0] == "switch_configs":
            return stage in _SWITCH_CONFIG_STAGES
        return path in (playbook, "ansible.cfg", INVENTORY)

    return sorted(path for path in files if wanted(path))


def plain_stage_contents(files, stage):
    paths = plain_stage_files(files, stage)
    if stage in _DIRECTORY_STAGES:
        return {path: files[path] for path in paths}
    code = [path for path in paths if not _is_var_file(path)]
    names = set().union(*(_words(files[path]) for path in code if path.endswith(_CODE_SUFFIXES)))
    variables = {path: _var_file(files[path]) for path in paths if _is_var_file(path)}
    for _ in range(_CLOSURE_ROUNDS):  # every key of every file, each round
        more = set()
        for parsed in variables.values():
            if parsed is not None:
                for key, (used, _hash) in parsed.keys.items():
                    if key in names or key.startswith("ansible_"):
                        more |= used
        if more <= names:
            break
        names |= more
    contents = {path: files[path] for path in code}
    for path, parsed in variables.items():
        if parsed is None:
            contents[path] = files[path]
            continue
        read = [key.encode() + b"=" + value_hash for key, (_used, value_hash) in sorted(parsed.keys.items())
                if key in names or key.startswith("ansible_")]
        if read:
            contents[path] = b"\n".join(read)
    return dict(sorted(contents.items()))


def assert_same_as_plain(files):
    for stage in STAGE_NAMES:
        try:
            expected = plain_stage_contents(files, stage)
        except (ValueError, KeyError) as plain_error:
            with pytest.raises(type(plain_error)):
                stage_contents(files, stage)
            continue
        assert stage_files(files, stage) == plain_stage_files(files, stage), stage
        assert stage_contents(files, stage) == expected, stage


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, bytes]]:
    return {name: render_files(load_and_check(name, REPO)[0]) for name in SHIPPED_SITES}


@pytest.mark.parametrize("site_name", SHIPPED_SITES)
def test_every_stage_reads_what_the_plain_version_reads(rendered, site_name):
    assert_same_as_plain(rendered[site_name])


def test_a_generated_site_reads_what_the_plain_version_reads(tmp_path):
    sys.path.insert(0, str(REPO / "bench"))
    from gen_site import SITE_NAME, write_site

    root = write_site(tmp_path / "root", 300)
    assert_same_as_plain(render_files(load_and_check(SITE_NAME, root)[0]))


def test_odd_paths_and_variables_land_where_the_plain_version_puts_them(rendered):
    files = dict(rendered["lab"])
    group_vars = next(path for path in files if path.startswith("inventory/group_vars/all/"))
    files.update({
        "inventory/group_vars/servers.yaml": b"fabric_host_mtu: 9000\nuser_only: 1\n",  # a file, not a folder
        "inventory/group_vars": b"not a folder\n",
        "inventory/host_vars/gpu-1/extra.yml": (
            b"ansible_port: '{{ custom_port }}'\ncustom_port: 2222\nnested: {a: '{{ fabric_host_mtu }}'}\n"),
        "inventory/notes.txt": b"nothing reads this\n",
        f"{PROJECT_DIR}/roles": b"a file named like the roles folder\n",
        f"{PROJECT_DIR}/roles/unused_role/tasks/main.yml": b"- debug: {msg: '{{ never_read }}'}\n",
        f"{PROJECT_DIR}/plugins/filter/extra.py": b"def filters(): return {}\n",
        "switch_configs/odd.conf": b"text\n",
        "ansible.cfg": files.get("ansible.cfg", b"[defaults]\n"),
        group_vars: b"- a list, not a mapping\n",
    })
    assert_same_as_plain(files)


def test_the_index_is_made_again_when_the_mapping_changes(rendered):
    files = dict(rendered["lab"])
    before = stage_files(files, "os")
    host_vars = next(path for path in before if path.startswith("inventory/host_vars/"))
    del files[host_vars]  # the same dict, one file fewer: the index must not serve it
    assert stage_files(files, "os") == plain_stage_files(files, "os") == [p for p in before if p != host_vars]
    files[host_vars] = rendered["lab"][host_vars] + b"extra: 1\n"  # back, with other content
    assert stage_contents(files, "os") == plain_stage_contents(files, "os")
    assert digest._paths_of(files).serves(files)
