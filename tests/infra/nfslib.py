"""Reading NFS server configurations as the storage checks need them: which export admits
which client, and how (tests/infra/test_host_storage.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOKEN = re.compile(r'"[^"]*"|[{};=]|[^\s{};="]+')


@dataclass
class Block:
    """One `NAME { key = value; ... }` block of a Ganesha configuration."""

    name: str
    params: dict[str, str] = field(default_factory=dict)
    """Keys lower-cased (Ganesha's keys are case-insensitive), values unquoted, commas kept."""
    blocks: list[Block] = field(default_factory=list)


def parse_ganesha(text: str) -> list[Block]:
    """The top-level blocks of a ganesha.conf (comments dropped). Raises ValueError on text
    that is not blocks of `key = value;` (an unbalanced brace, a key without a value)."""
    tokens = _TOKEN.findall("\n".join(line.split("#", 1)[0] for line in text.splitlines()))
    top = Block("")
    stack = [top]
    position = 0
    while position < len(tokens):
        token = tokens[position]
        if token == "}":
            if len(stack) == 1:
                raise ValueError("a '}' closes no block")
            stack.pop()
            position += 1
        elif position + 1 < len(tokens) and tokens[position + 1] == "{":
            block = Block(token.upper())
            stack[-1].blocks.append(block)
            stack.append(block)
            position += 2
        elif position + 1 < len(tokens) and tokens[position + 1] == "=":
            end = tokens.index(";", position) if ";" in tokens[position:] else -1
            if end < 0:
                raise ValueError(f"{token}: no ';' ends its value")
            value = " ".join(item.strip('"') for item in tokens[position + 2:end])
            stack[-1].params[token.lower()] = value
            position = end + 1
        else:
            raise ValueError(f"unexpected {token!r}")
    if len(stack) != 1:
        raise ValueError(f"block {stack[-1].name} is not closed")
    return top.blocks


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def ganesha_exports(text: str) -> dict[str, dict]:
    """Pseudo path -> {export_id, path, access, squash, clients: {client: access}} of every EXPORT."""
    found = {}
    for block in parse_ganesha(text):
        if block.name != "EXPORT":
            continue
        clients: dict[str, str] = {}
        for client in (child for child in block.blocks if child.name == "CLIENT"):
            for address in _items(client.params.get("clients", "")):
                clients[address] = client.params.get("access_type", "").upper()
        found[block.params.get("pseudo", "")] = {
            "export_id": block.params.get("export_id", ""),
            "path": block.params.get("path", ""),
            "access": block.params.get("access_type", "").upper(),
            "squash": block.params.get("squash", "").lower(),
            "clients": clients,
        }
    return found


def kernel_exports(text: str) -> dict[str, dict[str, set[str]]]:
    """Exported path -> {client: its options} of an /etc/exports (continuation lines joined)."""
    found: dict[str, dict[str, set[str]]] = {}
    for line in text.replace("\\\n", " ").splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        clients = found.setdefault(words[0].strip('"'), {})
        for entry in words[1:]:
            client, _, options = entry.partition("(")
            clients[client or "*"] = set(filter(None, options.rstrip(")").split(",")))
    return found
