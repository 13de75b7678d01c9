"""`stage_digest`: a fingerprint of exactly the files one stage depends on.

The Pulumi `Playbook` resource of a stage stores this digest, so `pulumi preview`
shows which stages would run again after a render. A stage depends on its
playbook, the roles its plays use (and their meta dependencies), the collection's
modules and filters those roles name (with the module_utils they import), ansible.cfg,
inventory/hosts.yml, the group_vars of every group its target machines belong
to, the host_vars of those machines and, for `fabric`, every switch config.
Changing a switch-only value therefore changes the fabric digest alone. The
`platform` stage runs no playbook: its digest covers what it applies, platform/**.

Inventory variable files count by the variables the stage can read: only the keys
whose names appear in the stage's playbook and roles (or in the values of keys it
reads), plus Ansible's own `ansible_*` connection variables. A fabric MTU in
group_vars/servers/fabric.yml therefore changes the stages whose roles use that
variable, not every stage that targets servers; a user's variable that no role
reads changes no stage. A variable file none of whose keys the stage reads is not
one of its inputs.

Those files are read as data: from the data render wrote them from while the content still
carries it (rackform.render.rendered_yaml: a fresh render, as `plan` and `deploy` have), else
parsed (a file from disk or edited by hand); both give the same digest, by one definition
(`_var_file_of`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache

import yaml

from rackform.collection import FQCN, PROJECT_DIR, short_name
from rackform.stages import STAGES
from rackform.role_code import module_utils_imports
from rackform.render.groups import host_groups
from rackform.render.rendered_yaml import RenderedYaml


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The rendered files as data; an inventory's `!vault` value reads as its ciphertext (a new
    ciphertext is a changed input, and the file's other keys still count one by one)."""


_Loader.add_constructor("!vault", lambda loader, node: loader.construct_scalar(node))

_PLAYBOOK_BY_STAGE = {stage.name: stage.playbook for stage in STAGES if stage.playbook is not None}
_ROLE_INCLUDES = {"include_role", "import_role", "ansible.builtin.include_role", "ansible.builtin.import_role"}
_TASK_LISTS = ("pre_tasks", "tasks", "post_tasks", "handlers")
INVENTORY = "inventory/hosts.yml"
_ROLES = f"{PROJECT_DIR}/roles/"
_MODULES = f"{PROJECT_DIR}/plugins/modules/"
_MODULE_UTILS = f"{PROJECT_DIR}/plugins/module_utils/"
_FILTERS = f"{PROJECT_DIR}/plugins/filter/"
_PLUGIN_NAME = re.compile(rb"\b" + re.escape(FQCN.encode()) + rb"\.(\w+)")
# Stages whose digest also covers switch_configs/ (the review copies of what the fabric stage deploys).
_SWITCH_CONFIG_STAGES = {"fabric"}
# Stages without a playbook -> the folder of rendered files they apply (rackform/render/platform_files.py).
_DIRECTORY_STAGES = {"platform": "platform/"}


def playbook_of(stage: str) -> str:
    try:
        return _PLAYBOOK_BY_STAGE[stage]
    except KeyError:
        raise ValueError(
            f"stage '{stage}' runs no playbook; stages with one: {', '.join(_PLAYBOOK_BY_STAGE)}"
        ) from None


_Index = tuple[dict[str, dict[str, int]], dict[str, set[str]]]


def _inventory_index(hosts_yml: bytes) -> _Index:
    """(host -> its groups, group -> its hosts) of one hosts.yml."""
    if isinstance(hosts_yml, RenderedYaml):
        return hosts_yml.derived(_inventory_index_of)
    return _parsed_inventory_index(hosts_yml)


@lru_cache(maxsize=4)
def _parsed_inventory_index(hosts_yml: bytes) -> _Index:
    """Parsed once per content."""
    return _inventory_index_of(yaml.load(hosts_yml, Loader=_Loader))


def _inventory_index_of(data) -> _Index:
    groups_of = host_groups((data or {}).get("all") or {})
    hosts_of: dict[str, set[str]] = {}
    for host, groups in groups_of.items():
        for group in groups:
            hosts_of.setdefault(group, set()).add(host)
    return groups_of, hosts_of


def _role_names(entries) -> list[str]:
    names = []
    for entry in entries or ():
        name = entry if isinstance(entry, str) else (entry or {}).get("role") or (entry or {}).get("name")
        if isinstance(name, str):
            names.append(short_name(name))
    return names


@lru_cache(maxsize=64)
def _plays(playbook: bytes) -> tuple[tuple[str, ...], frozenset[str]]:
    """Host patterns and role names used by a playbook's plays; parsed once per content."""
    plays = yaml.load(playbook, Loader=_Loader) or []
    patterns: list[str] = []
    roles: set[str] = set()
    for play in plays:
        hosts = play.get("hosts")
        patterns.extend(hosts if isinstance(hosts, list) else [str(hosts)] if hosts is not None else [])
        roles.update(_role_names(play.get("roles")))
        for key in _TASK_LISTS:
            for task in play.get(key) or ():
                for action in _ROLE_INCLUDES & set(task):
                    roles.update(_role_names([task[action]]))
    return tuple(patterns), frozenset(roles)


@lru_cache(maxsize=256)
def _meta_dependencies(meta: bytes) -> tuple[str, ...]:
    """The roles a role's meta/main.yml depends on; parsed once per content."""
    return tuple(_role_names((yaml.load(meta, Loader=_Loader) or {}).get("dependencies")))


def _with_dependencies(roles: frozenset[str], files: dict[str, bytes]) -> set[str]:
    found: set[str] = set()
    pending = list(roles)
    while pending:
        role = pending.pop()
        if role in found:
            continue
        found.add(role)
        meta = files.get(f"{_ROLES}{role}/meta/main.yml")
        if meta:
            pending.extend(_meta_dependencies(meta))
    return found


@lru_cache(maxsize=1024)
def _plugin_names(content: bytes) -> frozenset[str]:
    return frozenset(name.decode() for name in _PLUGIN_NAME.findall(content))


def _plugin_files(roles: set[str], files: dict[str, bytes], index: _Paths) -> set[str]:
    """The collection's modules and filters the roles name (`rackform.site.<name>`), and
    the module_utils those modules import, transitively."""
    named: set[str] = set()
    for role in roles:
        for path in index.by_role.get(role, ()):
            named |= _plugin_names(files[path])
    found = {f"{_MODULES}{name}.py" for name in named} & files.keys()
    found |= {path for path in index.filters if named & _words(files[path])}
    pending = [path for path in found if path.startswith(_MODULES)]
    while pending:
        for name in module_utils_imports(files[pending.pop()].decode()):
            path = f"{_MODULE_UTILS}{name}.py"
            if path in files and path not in found:
                found.add(path)
                pending.append(path)
    return found


def _targets(patterns: tuple[str, ...], groups_of: dict, hosts_of: dict) -> set[str]:
    """Machines a list of host patterns can reach. Errs on the side of more:
    exclusions and intersections are read as unions, templated patterns as `all`."""
    targets: set[str] = set()
    for pattern in patterns:
        if "{{" in pattern:
            return set(groups_of)
        for part in re.split(r"[,:]", pattern):
            name = part.lstrip("!&").strip()
            if name in ("all", "*"):
                return set(groups_of)
            targets |= hosts_of.get(name, set())
            if name in groups_of:
                targets.add(name)
    return targets


class _Paths:
    """A project's paths sorted into what `stage_files` picks them by, once for every stage:
    it used to split and test every path again for each stage (a fifth of `plan`'s digests).
    Each path lands where that test looked at it: tests/unit/test_digest_index.py holds
    stage_files and stage_contents to a plain version of them, path by path."""

    __slots__ = ("files", "contents", "by_role", "other_project", "filters", "group_vars", "host_vars",
                 "switch_configs", "others")

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.contents = tuple(files.items())
        """What the index was made from: it serves the same mapping only while it holds these very files."""
        self.by_role: dict[str, list[str]] = {}
        self.other_project: list[str] = []
        """Under the collection, not in a role: plugins, module_utils, galaxy.yml ..."""
        self.filters: list[str] = []
        self.group_vars: dict[str, list[str]] = {}
        self.host_vars: dict[str, list[str]] = {}
        self.switch_configs: list[str] = []
        self.others: set[str] = set()
        """The rest: a stage reads its playbook, ansible.cfg and hosts.yml of these."""
        for path in files:
            if path.startswith(PROJECT_DIR):
                if path.startswith(_ROLES):
                    self.by_role.setdefault(path[len(_ROLES):].split("/", 1)[0], []).append(path)
                else:
                    self.other_project.append(path)
                if path.startswith(_FILTERS):
                    self.filters.append(path)
                continue
            parts = path.split("/")
            if parts[:2] == ["inventory", "group_vars"] and len(parts) > 2:
                self.group_vars.setdefault(parts[2].removesuffix(".yml").removesuffix(".yaml"), []).append(path)
            elif parts[:2] == ["inventory", "host_vars"] and len(parts) > 2:
                self.host_vars.setdefault(parts[2].removesuffix(".yml").removesuffix(".yaml"), []).append(path)
            elif parts[0] == "switch_configs":
                self.switch_configs.append(path)
            else:
                self.others.add(path)

    def serves(self, files: dict[str, bytes]) -> bool:
        """Whether `files` is the very mapping indexed, holding the very same files still."""
        if files is not self.files or len(files) != len(self.contents):
            return False
        return all(path == then_path and content is then_content
                   for (path, content), (then_path, then_content) in zip(files.items(), self.contents))


_LAST_PATHS: list[_Paths] = []
"""The index of the mapping digested last: `stage_fingerprints` asks for every stage of one render."""


def _paths_of(files: dict[str, bytes]) -> _Paths:
    if _LAST_PATHS and _LAST_PATHS[0].serves(files):
        return _LAST_PATHS[0]
    index = _Paths(files)
    _LAST_PATHS[:] = [index]
    return index


def stage_files(files: dict[str, bytes], stage: str) -> list[str]:
    """The paths (sorted) whose content the given stage depends on."""
    if stage in _DIRECTORY_STAGES:
        return sorted(path for path in files if path.startswith(_DIRECTORY_STAGES[stage]))
    playbook = playbook_of(stage)
    patterns, roles = _plays(files[playbook])
    roles = _with_dependencies(roles, files)
    groups_of, hosts_of = _inventory_index(files.get(INVENTORY, b""))
    targets = _targets(patterns, groups_of, hosts_of)
    groups = {"all"}.union(*(groups_of[host] for host in targets))

    index = _paths_of(files)
    plugins = _plugin_files(roles, files, index)
    wanted = {path for path in index.other_project if path in plugins}
    for role in roles:
        wanted.update(index.by_role.get(role, ()))
    for group in groups:
        wanted.update(index.group_vars.get(group, ()))
    for target in targets:
        wanted.update(index.host_vars.get(target, ()))
    if stage in _SWITCH_CONFIG_STAGES:
        wanted.update(index.switch_configs)
    wanted.update(path for path in (playbook, "ansible.cfg", INVENTORY) if path in index.others)
    return sorted(wanted)


_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_VAR_DIRS = (("inventory", "group_vars"), ("inventory", "host_vars"))
_CODE_SUFFIXES = (".yml", ".yaml", ".j2", ".py", ".cfg")
_CLOSURE_ROUNDS = 3
"""Rounds of adding the names used inside read values (a: "{{ b }}" makes b read too)."""


@lru_cache(maxsize=4096)
def _words(content: bytes) -> frozenset[str]:
    return frozenset(word.decode() for word in _WORD.findall(content))


@dataclass(frozen=True, slots=True)
class _VarFile:
    """A variable file's top-level keys, each with the names its value uses and a hash of the value."""

    keys: dict[str, tuple[frozenset[str], bytes]]
    uses: tuple[tuple[str, frozenset[str]], ...]
    """(key, the names its value uses) of the keys whose value uses any: all the closure looks at."""
    lines: tuple[tuple[str, bool, bytes], ...]
    """(key, whether it is always read (`ansible_*`), its `name=hash` line), by key."""


def _var_file_from(keys: dict[str, tuple[frozenset[str], bytes]]) -> _VarFile:
    return _VarFile(
        keys,
        tuple((key, used) for key, (used, _hash) in keys.items() if used),
        tuple((key, key.startswith("ansible_"), key.encode() + b"=" + value_hash)
              for key, (_used, value_hash) in sorted(keys.items())),
    )


def _var_file(content: bytes) -> _VarFile | None:
    """The file's keys (None when it is not a mapping: then it counts whole), from the data
    render wrote it from when the content carries it, else parsed."""
    if isinstance(content, RenderedYaml):
        return content.derived(_var_file_of)
    return _parsed_var_file(content)


@lru_cache(maxsize=65536)
def _parsed_var_file(content: bytes) -> _VarFile | None:
    """Parsed once per distinct content."""
    try:
        data = yaml.load(content, Loader=_Loader)
    except yaml.YAMLError:
        return None
    return _var_file_of(data)


def _var_file_of(data) -> _VarFile | None:
    """What of a variable file a digest counts, key by key: the JSON of each top-level value
    (sorted keys; dates and other non-JSON values as their str) hashed, and the names it uses."""
    if not isinstance(data, dict):
        return None
    keys = {}
    for key, value in data.items():
        text = _JSON.encode(value).encode()
        worded = isinstance(value, (str, list, dict))
        counted = _COUNTED.get((text, worded))
        if counted is None:  # many short values recur (roles, racks, ports): each worked out once
            counted = (_words(text) if worded else frozenset(), hashlib.sha256(text).digest())
            if len(text) <= _COUNTED_TEXT_MAX:
                if len(_COUNTED) >= _COUNTED_MAX:
                    _COUNTED.clear()
                _COUNTED[text, worded] = counted
        keys[str(key)] = counted
    return _var_file_from(keys)


_COUNTED: dict[tuple[bytes, bool], tuple[frozenset[str], bytes]] = {}
"""(a value's JSON, whether its names count) -> (the names it uses, its hash), as _var_file_of counts it."""
_COUNTED_MAX = 1 << 16
_COUNTED_TEXT_MAX = 256
"""Longer values (a switch's ports, a manifest) rarely recur and are not kept: the memo stays small."""


_JSON = json.JSONEncoder(sort_keys=True, default=str)
"""What `json.dumps(value, sort_keys=True, default=str)` writes, without a new encoder per value."""


def _is_var_file(path: str) -> bool:
    return tuple(path.split("/")[:2]) in _VAR_DIRS


def stage_contents(files: dict[str, bytes], stage: str) -> dict[str, bytes]:
    """Path -> what of it the stage reads: whole files, and for inventory variable files
    the variables the stage's code names (see the module doc), as `name=hash` lines;
    files it reads nothing of are left out."""
    paths = stage_files(files, stage)
    if stage in _DIRECTORY_STAGES:
        return {path: files[path] for path in paths}
    code = [path for path in paths if not _is_var_file(path)]
    names = set(_code_words(tuple(_words(files[path]) for path in code if path.endswith(_CODE_SUFFIXES))))
    variables = {path: _var_file(files[path]) for path in paths if _is_var_file(path)}
    # Each round adds the names used by the keys read so far. Whether a key is read depends on
    # its name alone, so the keys of every file are taken together, name by name; a key once read
    # stays read (names only grow) and its names are already in, so a round looks only at the
    # names not read yet, and a key whose value uses no name adds nothing. The same names and
    # rounds as going over every key of every file each time.
    unread: dict[str, list[frozenset[str]]] = {}
    for parsed in variables.values():
        if parsed is not None:
            for key, used in parsed.uses:
                unread.setdefault(key, []).append(used)
    for _ in range(_CLOSURE_ROUNDS):
        read_now = [key for key in unread if key in names or key.startswith("ansible_")]  # _reads
        more: set[str] = set().union(*(used for key in read_now for used in unread.pop(key)))
        if more <= names:
            break
        names |= more
    contents = {path: files[path] for path in code}
    for path, parsed in variables.items():
        if parsed is None:
            contents[path] = files[path]
            continue
        read = [line for key, always, line in parsed.lines if always or key in names]  # _reads
        if read:
            contents[path] = b"\n".join(read)
    return dict(sorted(contents.items()))


@lru_cache(maxsize=64)
def _code_words(words: tuple[frozenset[str], ...]) -> frozenset[str]:
    """The names a stage's code uses: the same roles for every site a process renders."""
    return frozenset().union(*words)


def _reads(key: str, names: set[str]) -> bool:
    return key in names or key.startswith("ansible_")


def stage_digest(files: dict[str, bytes], stage: str) -> str:
    """sha256 (hex) over the names and the read contents (`stage_contents`) of the files `stage` depends on."""
    return digest_of(stage_contents(files, stage))


def digest_of(contents: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for path, content in contents.items():
        digest.update(f"{path}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()
