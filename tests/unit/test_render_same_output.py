"""Render's speed-ups change no byte, and checks and render run without the cyclic collector.

The faster paths (issue 19, bench_scale) are each held equal to a straightforward version
of the same step kept here: the YAML writer's memo and inline entries against the writer as
it was (every string through PyYAML's resolver), the switch templates' dict-first attribute
lookup against Jinja's own, and the rack diagrams' shared rails, empty slots and legends
against drawings made with those caches empty. The inputs are the rendered data of every
shipped site and of a generated 1,000-node site, plus values chosen to be awkward.
"""

from __future__ import annotations

import datetime
import gc
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from rackform.checks.registry import REGISTRY
from rackform.checks.runner import run_checks
from rackform.model.loader import load_site
from rackform.model.source import VAULT_TAG, VaultValue
from rackform.render import diagram, switch_configs, yamltext
from rackform.render.assets import role_templates
from rackform.render.groups import host_groups
from rackform.render.project import build_inventory, render_files
from rackform.render.rendered_yaml import RenderedYaml

REPO = Path(__file__).resolve().parents[2]
SHIPPED_SITES = sorted(path.stem for path in (REPO / "topologies" / "sites").glob("*.yaml"))
GENERATED_NODES = 1000


# ---------------------------------------------------------------- the reference YAML writer

_RESOLVER = yaml.resolver.Resolver()


def reference_scalar(value: str) -> str:
    """yamltext.scalar before the memo and the dotted-digits shortcut."""
    if yamltext._PLAIN.fullmatch(value):
        if value[0].isalpha() or value[0] == "_":
            if value.lower() not in yamltext._WORDS:
                return value
        elif _RESOLVER.resolve(yaml.ScalarNode, value, (True, False)) == "tag:yaml.org,2002:str":
            return value
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return yamltext._UNSAFE.sub(lambda found: f"\\u{ord(found.group()):04x}",
                                yamltext.json.dumps(value, ensure_ascii=False))


def reference_atom(value: Any) -> str:
    if type(value) is str:
        return reference_scalar(value)
    if type(value) is VaultValue:
        return f"{VAULT_TAG} {yamltext.json.dumps(str(value))}"
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    if value is None:
        return "null"
    if type(value) is float:
        return yamltext._float(value)
    assert isinstance(value, datetime.date)
    return str(value)


def reference_write(value: Any, indent: str, out: list[str]) -> None:
    """Every entry through reference_entry, no shortcut."""
    if type(value) is dict:
        for key, item in value.items():
            reference_entry(f"{indent}{reference_atom(key)}:", item, indent, out)
        return
    for item in value:
        if type(item) is dict and item:
            lines: list[str] = []
            reference_write(item, indent + "  ", lines)
            out.append(f"{indent}- {lines[0][len(indent) + 2:]}")
            out.extend(lines[1:])
        else:
            reference_entry(f"{indent}-", item, indent, out)


def reference_entry(prefix: str, item: Any, indent: str, out: list[str]) -> None:
    inner = indent + "  "
    if type(item) is str:
        if "\n" in item and (block := yamltext._literal_block(item, inner)):
            out.append(f"{prefix} {block}")
        elif len(prefix) + 1 + len(line := reference_scalar(item)) > yamltext.MAX_LINE and (
                block := yamltext._folded_block(item, inner)):
            out.append(f"{prefix} {block}")
        else:
            out.append(f"{prefix} {line}")
    elif type(item) is VaultValue:
        block = yamltext._literal_block(str(item), inner)
        out.append(f"{prefix} {VAULT_TAG} {block}" if block else f"{prefix} {reference_atom(item)}")
    elif type(item) is dict:
        if item:
            out.append(prefix)
            reference_write(item, inner, out)
        else:
            out.append(f"{prefix} {{}}")
    elif type(item) is list:
        if yamltext._is_flat_list(item):
            out.append(f"{prefix} [{', '.join(reference_atom(element) for element in item)}]")
        else:
            out.append(prefix)
            reference_write(item, inner, out)
    elif item is None and prefix.endswith(":"):
        out.append(prefix)
    else:
        out.append(f"{prefix} {reference_atom(item)}")


def reference_dump(data: dict | list, header: str = "") -> str:
    if not data:
        body = "{}\n" if isinstance(data, dict) else "[]\n"
    else:
        lines: list[str] = []
        reference_write(data, "", lines)
        body = "\n".join(lines) + "\n"
    return header + "---\n" + body if header else "---\n" + body


# ---------------------------------------------------------------- sites

@pytest.fixture(scope="module")
def sites() -> dict[str, Any]:
    """Every shipped site and a generated 1,000-node site, loaded."""
    loaded = {name: load_site(name, REPO) for name in SHIPPED_SITES}
    sys.path.insert(0, str(REPO / "bench"))
    from gen_site import SITE_NAME, write_site

    with tempfile.TemporaryDirectory(prefix="rackform-same-output-") as folder:
        loaded[f"{SITE_NAME}-{GENERATED_NODES}"] = load_site(SITE_NAME, write_site(Path(folder), GENERATED_NODES))
    return loaded


@pytest.fixture(scope="module")
def rendered(sites) -> dict[str, dict[str, bytes]]:
    return {name: render_files(site) for name, site in sites.items()}


def test_every_rendered_yaml_file_is_what_the_reference_writer_writes(rendered):
    compared = 0
    for files in rendered.values():
        for path, content in files.items():
            if isinstance(content, RenderedYaml):
                header = content[: content.index(b"---\n")].decode()
                assert content.decode() == reference_dump(content.data, header), path
                compared += 1
    assert compared > GENERATED_NODES


_AWKWARD = [
    "", "plain", "yes", "No", "~", "null", "1", "1.0", "1e3", "0x1f", "017", "1_000", ".inf", "12:30:00", "1:20",
    "2001-12-14", "10.20.1.15/24", "10.20.1.15", "1.2", "1.2.3", "1.2.3/4", "1..2", "1.2.", ".1.2", "1.2.3.4/",
    "1.2.3.4/5/6", "1.2.3e4", "1.2.3-4", "1_0.2.3", "0.0.0.0/0", "2001:db8::1", " leading", "trailing ", "a: b",
    "a #b", "it's", 'say "hi"', "back\\slash", "tab\there", "two\nlines", "ends\n", "é ü ß", "\ufeff",
    "{{ jinja_name }}", "x" * 170, " ".join(["word"] * 60), "del\x7f", "line\u2028separator",
    0, -1, 2**70, 1.5, -0.0, 1e20, float("nan"), True, False, None, datetime.date(2026, 11, 26),
    VaultValue("$ANSIBLE_VAULT;1.1;AES256\n61626364"), [], {}, {1: "int key", True: "bool key"},
]


def _awkward_value(chooser: random.Random, depth: int = 0):
    kind = chooser.random()
    if depth < 3 and kind < 0.25:
        return [_awkward_value(chooser, depth + 1) for _ in range(chooser.randrange(4))]
    if depth < 3 and kind < 0.5:
        keys = [chooser.choice(["k", "yes", "1", "10.0.0.1", "a b", "x" * 150]) + str(i) for i in range(4)]
        return {key: _awkward_value(chooser, depth + 1) for key in keys[: chooser.randrange(5)]}
    return chooser.choice(_AWKWARD)


@pytest.mark.parametrize("seed", range(20))
def test_awkward_values_are_written_as_the_reference_writes_them(seed):
    chooser = random.Random(seed)
    data = {f"key_{index}": _awkward_value(chooser) for index in range(60)}
    assert yamltext.dump(data, "# h\n") == reference_dump(data, "# h\n")
    assert yamltext.dump(data) == reference_dump(data)  # again, from the memo


def test_the_scalar_memo_starts_over_when_full_and_still_answers_the_same(monkeypatch):
    monkeypatch.setattr(yamltext, "_SCALARS_MAX", 8)
    yamltext._SCALARS.clear()
    values = [str(value) for value in _AWKWARD if type(value) is str] * 2
    assert [yamltext.scalar(value) for value in values] == [reference_scalar(value) for value in values]
    assert len(yamltext._SCALARS) <= 8


def test_digits_with_two_dots_or_more_are_strings_to_yaml():
    """yamltext writes them plain without asking the resolver: hold that to the resolver."""
    chooser = random.Random(19)
    samples = {"1.2.3", "0.0.0.0/0", "10.128.1.98/16", "1.2.3.4.5.6", "007.08.09/10", "255.255.255.255"}
    for _ in range(5000):
        parts = [str(chooser.choice([0, 1, 7, 12, 60, 99, 255, 1000])) for _ in range(chooser.randrange(3, 6))]
        samples.add(".".join(parts) + (f"/{chooser.randrange(33)}" if chooser.random() < 0.5 else ""))
    for text in samples:
        assert yamltext._DOTTED.fullmatch(text), text
        assert _RESOLVER.resolve(yaml.ScalarNode, text, (True, False)) == "tag:yaml.org,2002:str", text
        assert yaml.safe_load(f"v: {text}") == {"v": text}


# ---------------------------------------------------------------- switch templates

def test_dict_first_getattr_answers_as_jinja_does():
    environment = role_templates().overlay()
    fast = switch_configs._dict_first_getattr(environment)

    class Thing:
        peer = "attribute"

    class Mapping(dict):
        peer = "class attribute"

    objects = [{"peer": "leaf-1", "items": "shadowed", "get": 1}, {}, Mapping(peer="item"), Thing(), ["a"], "text", 3,
               None, jinja2.StrictUndefined(name="x")]
    for obj in objects:
        for attribute in ("peer", "items", "get", "keys", "missing", "__class__", "__dict__", "upper"):
            try:
                expected = environment.getattr(obj, attribute)
            except jinja2.UndefinedError:
                with pytest.raises(jinja2.UndefinedError):
                    fast(obj, attribute)
                continue
            got = fast(obj, attribute)
            if isinstance(expected, jinja2.Undefined):
                assert type(got) is type(expected)
                assert (got._undefined_obj, got._undefined_name) == (expected._undefined_obj, expected._undefined_name)
            else:
                assert got == expected, (obj, attribute)


def test_switch_configs_are_what_jinja_renders_without_the_shortcuts(sites, monkeypatch):
    """Every switch of every site, with the role templates loaded the plain way each time."""
    fast = {}
    for name, site in sites.items():
        inventory = build_inventory(site)
        arguments = (inventory.switch_vars, host_groups(inventory.tree), inventory.group_vars, inventory.server_vars)
        fast[name] = (switch_configs.switch_config_files(*arguments), arguments)
    plain = role_templates().overlay()
    plain.filters = {**plain.filters, "quote": switch_configs.shlex.quote}
    monkeypatch.setattr(switch_configs, "_role_template", plain.get_template)
    # servers.intf.j2 works out its bridge itself, as it does under Ansible.
    monkeypatch.setattr(switch_configs, "server_bridge", lambda context: None)
    assert sum(len(files) for files, _ in fast.values()) > 100
    assert sum(" address " in text for files, _ in fast.values() for text in files.values()) > 50
    for name, (files, arguments) in fast.items():
        assert switch_configs.switch_config_files(*arguments) == files, name


SERVER_ADDRESSES = [
    "10.20.1.15/24", "10.20.17.200/20", "192.168.3.77/26", "10.0.0.6/30", "10.0.0.6/32", "10.0.0.6/31",
    "10.0.0.6/0", "10.0.0.6/08", "010.000.001.009/24", "255.255.255.255/1",
    # What the Python side leaves to the template (its own answer or its own error):
    "10.0.0.6/33", "10.0.0.256/24", "10.0.0/24", "10.0.0.6", "10.0.0.6/24/1", " 10.0.0.6/24", "10.0.0.\u0663/24",
]


def _leaf_context(addresses: list[object], **link: object) -> dict:
    ports = {f"swp{i}": {"peer": f"host-{i}", "peer_port": "fab0", "bgp_peer": False, **link}
             for i in range(1, len(addresses) + 1)}
    ports["swp9"] = {"peer": "spine-1", "peer_port": "swp1", "bgp_peer": True}
    ports["swp10"] = {"peer": "unknown", "peer_port": "fab0", "bgp_peer": False}
    hostvars = {f"host-{i}": {"fabric_ports": {"fab0": {"address": address}}} for i, address in enumerate(addresses, 1)}
    return {**switch_configs.role_defaults(), "inventory_hostname": "leaf-1", "switch_role": "leaf",
            "switch_ports": ports, "hostvars": hostvars}


def _plain_servers_file(context: dict) -> str:
    plain = role_templates().overlay()
    return plain.get_template(f"{switch_configs.ROLE}/templates/{switch_configs.SERVER_BRIDGE_TEMPLATE}").render(context)


@pytest.mark.parametrize("address", SERVER_ADDRESSES)
def test_server_bridge_is_what_the_template_works_out(address):
    context = _leaf_context([address, "10.20.1.16/24", None, ""])
    part = next(part for part in switch_configs.CUMULUS_FILES if part.template == switch_configs.SERVER_BRIDGE_TEMPLATE)
    try:
        expected = _plain_servers_file(context)
    except Exception as error:  # noqa: BLE001 - the same error, whichever side works it out
        with pytest.raises(type(error)):
            switch_configs.cumulus_file_text(part, context)
        return
    assert switch_configs.cumulus_file_text(part, context) == expected


def test_server_bridge_is_worked_out_in_python_for_rackforms_own_values():
    bridge = switch_configs.server_bridge(_leaf_context(["10.20.1.15/24", "10.20.1.16/24", "10.20.17.200/20"]))
    assert bridge.ports == ["swp1", "swp2", "swp3", "swp10"]
    assert bridge.gateways == ["10.20.1.1/24", "10.20.16.1/20"]


@pytest.mark.parametrize("odd", ["10.0.0.6/33", "10.0.0.256/24", " 10.0.0.6/24", 10, ["10.0.0.6/24"]])
def test_server_bridge_leaves_anything_odd_to_the_template(odd):
    assert switch_configs.server_bridge(_leaf_context(["10.20.1.15/24", odd])) is None


def test_a_bridge_named_in_the_inventory_is_what_both_renders_use():
    """Ansible would use an inventory value of that name: the review does too."""
    context = _leaf_context(["10.20.1.15/24"])
    context[switch_configs.SERVER_BRIDGE_VARIABLE] = {"ports": ["swp7"], "gateways": ["10.9.9.1/24"]}
    part = next(part for part in switch_configs.CUMULUS_FILES if part.template == switch_configs.SERVER_BRIDGE_TEMPLATE)
    assert switch_configs.cumulus_file_text(part, context) == _plain_servers_file(context)
    assert "bridge-ports swp7\n" in _plain_servers_file(context)


# ---------------------------------------------------------------- diagrams

def _clear_diagram_caches() -> None:
    for cached in (diagram._rails, diagram._empty_slots, diagram._legend):
        cached.cache_clear()


def test_rack_drawings_do_not_depend_on_what_was_drawn_before(sites):
    """Shared parts are keyed by what they are drawn from: a rack drawn alone, with the
    caches empty, is the rack drawn after all the others."""
    for site in sites.values():
        together = diagram.site_svgs(site)
        for rack in reversed(site.racks):
            _clear_diagram_caches()
            assert diagram.rack_svg(site, rack) == together[f"{rack.name}.svg"], rack.name


# ---------------------------------------------------------------- the cyclic collector

def test_checks_and_render_run_without_a_cyclic_collection(sites):
    """On a 1,000-node site the collector would otherwise walk what they build again and
    again; afterwards it is on again, as it was."""
    site = sites[f"scale-{GENERATED_NODES}"]
    collections: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    assert gc.isenabled()
    gc.callbacks.append(count)
    try:
        run_checks(site)
        render_files(site)
    finally:
        gc.callbacks.remove(count)
    # At most the one round that catches up once a phase is over (the old code: hundreds).
    assert len(collections) <= 2, collections
    assert gc.isenabled()


def test_a_failing_check_leaves_the_collector_on(sites, monkeypatch):
    def broken(site):
        raise RuntimeError("broken check")

    monkeypatch.setattr("rackform.checks.runner.REGISTRY", [*REGISTRY, broken])
    with pytest.raises(RuntimeError, match="broken check"):
        run_checks(sites["lab"])
    assert gc.isenabled()
