"""A small SSH session for Linux network OSes (Cumulus): run a command, read a file,
replace a file atomically. paramiko, as netmiko uses it; no shell prompts to parse.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import paramiko

from rackform.fabric.driver import Connection, FabricError

SSH_ERRORS = (paramiko.SSHException, OSError, EOFError)


@dataclass(frozen=True, slots=True)
class CommandResult:
    status: int
    stdout: str
    stderr: str


class SshSession:
    def __init__(self, connection: Connection, name: str):
        self.connection = connection
        self.name = name
        self._client: paramiko.SSHClient | None = None

    def _open(self) -> paramiko.SSHClient:
        if self._client is None:
            link = self.connection
            client = paramiko.SSHClient()
            if link.known_hosts:
                client.load_host_keys(link.known_hosts)
                client.set_missing_host_key_policy(paramiko.RejectPolicy())
            else:
                client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
            try:
                client.connect(link.host, port=link.port, username=link.username, password=link.password,
                               key_filename=link.key_file, allow_agent=False, look_for_keys=False,
                               timeout=link.timeout_s, banner_timeout=link.timeout_s)
            except SSH_ERRORS as error:
                client.close()
                raise FabricError(f"{self.name}: cannot log in to {link.host}:{link.port} as {link.username}: "
                                  f"{error}") from error
            self._client = client
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def run(self, command: str, stdin: str | None = None, timeout_s: float = 120.0) -> CommandResult:
        """Run a shell command (through `sudo -n` when the connection says so)."""
        line = f"sudo -n sh -c {shlex.quote(command)}" if self.connection.become else command
        try:
            channel_in, channel_out, channel_err = self._open().exec_command(line, timeout=timeout_s)
            if stdin is not None:
                channel_in.write(stdin)
            channel_in.channel.shutdown_write()
            stdout = channel_out.read().decode(errors="replace")
            stderr = channel_err.read().decode(errors="replace")
            status = channel_out.channel.recv_exit_status()
        except SSH_ERRORS as error:
            self.close()
            raise FabricError(f"{self.name}: `{command}` failed: {error}") from error
        return CommandResult(status, stdout, stderr)

    def check(self, command: str, stdin: str | None = None) -> str:
        result = self.run(command, stdin)
        if result.status != 0:
            detail = (result.stderr or result.stdout).strip() or f"exit {result.status}"
            raise FabricError(f"{self.name}: `{command}` failed: {detail}")
        return result.stdout

    def read_files(self, paths: list[str]) -> dict[str, str | None]:
        """Path -> content, None for a file that does not exist; one round trip per file."""
        contents: dict[str, str | None] = {}
        for path in paths:
            result = self.run(f"cat {shlex.quote(path)}")
            contents[path] = result.stdout if result.status == 0 else None
        return contents

    def write_file(self, path: str, content: str, mode: int, owner: str) -> None:
        """Replace `path` atomically (a temporary file renamed over it), creating its folder."""
        quoted = shlex.quote(path)
        self.check(
            f"mkdir -p \"$(dirname {quoted})\" && tmp=$(mktemp {quoted}.XXXXXX) && cat > \"$tmp\" "
            f"&& chmod {mode:o} \"$tmp\" && chown {shlex.quote(owner)}: \"$tmp\" && mv \"$tmp\" {quoted}",
            stdin=content,
        )

    def remove_file(self, path: str) -> None:
        self.check(f"rm -f {shlex.quote(path)}")
