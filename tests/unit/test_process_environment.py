"""rackform.process_environment: what a process rackform starts is given of our environment.

Three parts: every process start in rackform/ (and stacks/) goes through `tool_environment`
(an AST scan, which fails on a new start that bypasses it); the allow-lists themselves; and
real processes started through rackform's own paths (mirror, lab, day-2 kubectl, the fabric's
ssh, a maintenance hook, `rackform init`'s git, the Pulumi provider's stage process), each a
stand-in that prints the environment it got: a secret set here never arrives, what a tool is
allowed does.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import types
from pathlib import Path

import pytest

from rackform.process_environment import BASE, PROXY_NAMES, TOOLS, looks_secret, tool_environment

REPO = Path(__file__).resolve().parents[2]
SCANNED = (REPO / "rackform", REPO / "stacks")

# --------------------------------------------------------------------------- the scan

STARTS_WITH_ENV = {
    "subprocess": {"run": "env", "Popen": "env", "call": "env", "check_call": "env", "check_output": "env"},
    "asyncio": {"create_subprocess_exec": "env", "create_subprocess_shell": "env"},
    "ansible_runner": {"run": "envvars", "run_async": "envvars", "init_runner": "envvars"},
    "ansible_runner.interface": {"run": "envvars", "run_async": "envvars", "init_runner": "envvars"},
}
"""Module -> function that starts a process -> its keyword for the environment."""
STARTS_REFUSED = {
    "os": {"system", "popen", "execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe",
           "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe",
           "posix_spawn", "posix_spawnp"},
    "subprocess": {"getoutput", "getstatusoutput"},
    "pty": {"spawn"},
}
"""Starts with no environment to give (or a shell's): none belongs in rackform."""
EXEMPT = {
    ("rackform/lab/chassis_hook.py", "subprocess.Popen"): (
        "ipmi_sim's power hook, standard library only: its `sleep infinity` (a lab host that is on) gets the "
        "hook's environment, which is ipmi_sim's, tool_environment('ipmi_sim') already (rackform.lab.bmc)"),
}
"""(file, call) -> why it may start a process without tool_environment."""


def process_starts(source: str) -> list[tuple[int, str, str | None, ast.Call, list[ast.AST]]]:
    """Each process start in `source`: (line, `module.function`, its environment keyword or None
    when refused, the call, its enclosing functions innermost last)."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # local name -> module or module.function
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                aliases[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    found = []

    def visit(node: ast.AST, scopes: list[ast.AST]) -> None:
        if isinstance(node, ast.Call):
            qualified = _qualified(node.func, aliases)
            if qualified is not None:
                module, _, function = qualified.rpartition(".")
                if function in STARTS_WITH_ENV.get(module, {}):
                    found.append((node.lineno, qualified, STARTS_WITH_ENV[module][function], node, list(scopes)))
                elif function in STARTS_REFUSED.get(module, set()):
                    found.append((node.lineno, qualified, None, node, list(scopes)))
        inner = [*scopes, node] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else scopes
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, [tree])
    return found


def _qualified(func: ast.expr, aliases: dict[str, str]) -> str | None:
    if isinstance(func, ast.Name):
        return aliases.get(func.id)
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name) and func.id in aliases:
        return ".".join([aliases[func.id], *reversed(parts)])
    return None


def _own_nodes(scope: ast.AST):
    """The nodes of `scope`, not those of functions defined inside it."""
    for child in ast.iter_child_nodes(scope):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield child
            yield from _own_nodes(child)


def _functions(tree: ast.AST) -> dict[str, ast.AST]:
    return {node.name: node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def routed(expression: ast.expr, scope: ast.AST, functions: dict[str, ast.AST], seen: frozenset[str] = frozenset()
           ) -> bool:
    """`expression` is tool_environment(...): directly, through dict(...), through a function of
    this module that only returns such, or a local name only ever bound to such. A dict display
    that names each variable (no `**`: nothing of ours wholesale) passes too: a tool given less
    than the base, on purpose (gpg in a home of its own)."""
    if isinstance(expression, ast.Dict):
        return None not in expression.keys
    if isinstance(expression, ast.Call):
        func = expression.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name == "tool_environment":
            return True
        if name == "dict" and len(expression.args) == 1 and not expression.keywords:
            return routed(expression.args[0], scope, functions, seen)
        if name in functions and name not in seen:
            function = functions[name]
            returns = [node.value for node in _own_nodes(function) if isinstance(node, ast.Return)]
            return bool(returns) and all(value is not None and routed(value, function, functions, seen | {name})
                                         for value in returns)
        return False
    if isinstance(expression, ast.Name):
        values = []
        for node in _own_nodes(scope):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == expression.id
                                                    for t in node.targets):
                values.append(node.value)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and isinstance(
                    node.target, ast.Name) and node.target.id == expression.id:
                values.append(node.value)
            elif expression.id in _bound_names(node):
                return False  # bound by a loop or a `with`: not a tool_environment
        return bool(values) and all(value is not None and routed(value, scope, functions, seen) for value in values)
    return False


def _bound_names(node: ast.AST) -> set[str]:
    """The names a `for`, comprehension or `with ... as` binds."""
    targets = [node.target] if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) else [
        item.optional_vars for item in node.items if item.optional_vars is not None] if isinstance(
        node, (ast.With, ast.AsyncWith)) else []
    return {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}


def bypasses(source: str, where: str) -> list[str]:
    """Every process start in `source` that does not take its environment from tool_environment."""
    tree = ast.parse(source)
    functions = _functions(tree)
    problems = []
    for line, call, keyword, node, scopes in process_starts(source):
        if (where, call) in EXEMPT:
            continue
        if keyword is None:
            problems.append(f"{where}:{line}: {call} starts a process with no environment of its own to give")
            continue
        given = next((k.value for k in node.keywords if k.arg == keyword), None)
        if given is None:
            problems.append(f"{where}:{line}: {call} without {keyword}=: the process would get all of ours")
        elif not routed(given, scopes[-1], functions):
            problems.append(f"{where}:{line}: {call}'s {keyword}= is not from tool_environment")
    return problems


def scanned_files() -> list[Path]:
    return sorted(path for folder in SCANNED for path in folder.rglob("*.py") if "_assets" not in path.parts)


def test_every_process_rackform_starts_gets_its_tools_environment():
    problems = [problem for path in scanned_files()
                for problem in bypasses(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))]
    assert problems == [], ("a process start bypasses rackform.process_environment.tool_environment "
                            "(docs/security.md):\n" + "\n".join(problems))


def test_the_scan_sees_the_starts_it_vouches_for():
    """Not vacuous: the known starts are found (verify's pytest, the platform's kubectl and helm,
    the stage process, ansible-runner, the mirror's and the lab's runners ...)."""
    starts = {(str(path.relative_to(REPO)), call) for path in scanned_files()
              for _line, call, *_ in process_starts(path.read_text(encoding="utf-8"))}
    assert {("rackform/run/verify.py", "subprocess.Popen"), ("rackform/run/platform_apply.py", "subprocess.Popen"),
            ("rackform/run/platform_apply.py", "subprocess.run"), ("rackform/run/stage_process.py", "subprocess.Popen"),
            ("rackform/run/ansible.py", "ansible_runner.interface.init_runner"),
            ("rackform/mirror/__init__.py", "subprocess.run"), ("rackform/lab/__init__.py", "subprocess.run"),
            ("rackform/commands/console.py", "subprocess.run")} <= starts
    assert len(starts) >= 18 and set(EXEMPT) <= starts


@pytest.mark.parametrize(("source", "problem"), [
    ("import subprocess\nsubprocess.run(['ls'])\n", "without env="),
    ("import os, subprocess\nsubprocess.run(['ls'], env={**os.environ, 'A': 'b'})\n", "not from tool_environment"),
    ("import os, subprocess\ndef f(env):\n    subprocess.Popen(['ls'], env=env)\n", "not from tool_environment"),
    ("import os, subprocess\ndef f():\n    env = dict(os.environ)\n    subprocess.run(['ls'], env=env)\n",
     "not from tool_environment"),
    ("import os, subprocess\ndef f():\n    env = {**os.environ}\n    subprocess.run(['ls'], env=env)\n",
     "not from tool_environment"),
    ("import os, subprocess\nsubprocess.run(['ls'], env=os.environ.copy())\n", "not from tool_environment"),
    ("import subprocess as sp\nsp.check_output(['ls'])\n", "without env="),
    ("from subprocess import Popen\nPopen(['ls'])\n", "without env="),
    ("import os\nos.system('ls')\n", "no environment of its own"),
    ("import os\nos.execvp('ls', ['ls'])\n", "no environment of its own"),
    ("import os, subprocess\ndef f():\n    with open('x') as env:\n        subprocess.run(['ls'], env=env)\n",
     "not from tool_environment"),
    ("from ansible_runner.interface import init_runner\ninit_runner(private_data_dir='x')\n", "without envvars="),
    ("import asyncio\nasync def f():\n    await asyncio.create_subprocess_exec('ls')\n", "without env="),
])
def test_the_scan_fails_on_a_start_that_bypasses_it(source, problem):
    [found] = bypasses(source, "new.py")
    assert problem in found


@pytest.mark.parametrize("source", [
    "import subprocess\nfrom rackform.process_environment import tool_environment\n"
    "subprocess.run(['ls'], env=tool_environment('ls'))\n",
    "import subprocess\nfrom rackform import process_environment\n"
    "def f():\n    env = process_environment.tool_environment('go', {'A': 'b'})\n    env['B'] = 'c'\n"
    "    subprocess.run(['go'], env=env)\n",
    "import subprocess\nfrom rackform.process_environment import tool_environment\n"
    "def _env(tool):\n    return tool_environment(tool)\n"
    "def f():\n    subprocess.Popen(['helm'], env=_env('helm'))\n",
    "import os, subprocess\ndef _env(home):\n    return {'PATH': os.environ.get('PATH', ''), 'GNUPGHOME': home}\n"
    "subprocess.run(['gpg'], env=_env('/h'))\n",
])
def test_the_scan_accepts_what_comes_from_tool_environment(source):
    assert bypasses(source, "new.py") == []


# --------------------------------------------------------------------------- the allow-lists

SECRETS = {"AWS_SECRET_ACCESS_KEY": "aws-secret", "GITHUB_TOKEN": "gh-token", "RACKFORM_VAULT_PASSWORD": "vault-pw",
           "RACKFORM_UNIT_TOKEN": "unit-token", "DATABASE_PASSWORD": "db-pw", "PULUMI_ACCESS_TOKEN": "pulumi-token",
           "PULUMI_CONFIG_PASSPHRASE": "passphrase", "RACKFORM_SWITCH_PASSWORD": "switch-pw",
           "HELM_REPO_PASSWORD": "helm-pw", "GOOGLE_APPLICATION_CREDENTIALS": "/keys/gcp.json"}
ALLOWED = {"HOME": "/home/unit", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "TMPDIR": "/tmp/unit",
           "https_proxy": "http://proxy.example:3128", "no_proxy": "localhost,10.0.0.0/8",
           "SSL_CERT_FILE": "/etc/site-ca.pem"}
PER_TOOL = {"SSH_AUTH_SOCK": "/run/unit/agent.sock", "KUBECONFIG": "/kube/config", "HELM_CACHE_HOME": "/helm-cache",
            "HELM_KUBECONTEXT": "elsewhere", "GOPROXY": "http://goproxy.example", "GONOSUMDB": "example.com/*",
            "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "PULUMI_HOME": "/pulumi", "ANSIBLE_CONFIG": "/other.cfg",
            "ANSIBLE_PRIVATE_KEY_FILE": "/keys/id", "RACKFORM_STATE_DIR": "/state",
            "RACKFORM_VAULT_PASSWORD_FILE": "/secrets/vault-pw", "GIT_DIR": "/elsewhere/.git",
            "PYTHONPATH": "/unit/python", "RACKFORM_LAB_DIR": "/labs"}
ENVIRON = {**SECRETS, **ALLOWED, **PER_TOOL, "PATH": "/usr/bin:/bin"}

EXPECTED_BY_TOOL = {
    "ansible": {"SSH_AUTH_SOCK", "ANSIBLE_PRIVATE_KEY_FILE", "PYTHONPATH"},
    "pytest": {"SSH_AUTH_SOCK", "ANSIBLE_PRIVATE_KEY_FILE", "PYTHONPATH"},
    "kubectl": {"KUBECONFIG"},
    "helm": {"KUBECONFIG", "HELM_CACHE_HOME"},
    "go": {"GOPROXY", "GONOSUMDB", "GOTOOLCHAIN", "GOFLAGS", "SSH_AUTH_SOCK"},
    "pulumi": {"PULUMI_HOME", "PULUMI_ACCESS_TOKEN", "PULUMI_CONFIG_PASSPHRASE", "PYTHONPATH"},
    "rackform": {"SSH_AUTH_SOCK", "KUBECONFIG", "HELM_CACHE_HOME", "ANSIBLE_PRIVATE_KEY_FILE", "RACKFORM_STATE_DIR",
                 "RACKFORM_VAULT_PASSWORD_FILE", "RACKFORM_SWITCH_PASSWORD", "PYTHONPATH", "RACKFORM_LAB_DIR"},
    "ssh": {"SSH_AUTH_SOCK"},
    "ipmi_sim": {"RACKFORM_LAB_DIR"},
    "maintenance-hook": {"SSH_AUTH_SOCK", "KUBECONFIG", "ANSIBLE_PRIVATE_KEY_FILE"},
    "git": set(),
    "pip": {"PYTHONPATH"},
    "ipmitool": set(),
    "an-unlisted-tool": set(),
}


@pytest.fixture()
def beside(tools_beside_rackform) -> Path:
    return tools_beside_rackform()


@pytest.mark.parametrize(("tool", "additions"), EXPECTED_BY_TOOL.items())
def test_each_tool_gets_the_base_and_its_own_names_only(beside, tool, additions):
    env = tool_environment(tool, environ=ENVIRON)
    assert set(env) == {"PATH", *ALLOWED, *additions}
    assert env["PATH"] == os.pathsep.join([str(beside), "/usr/bin", "/bin"])


def test_every_profile_is_tested_above():
    assert set(TOOLS) - set(EXPECTED_BY_TOOL) <= {"ssh-keyscan", "ssh-keygen", "skopeo", "umoci", "apt-get",
                                                  "apt-cache", "debootstrap", "systemd-nspawn"}


def test_what_the_caller_gives_is_passed_as_given(beside):
    env = tool_environment("ipmitool", {"IPMI_PASSWORD": "bmc-pw", "LANG": "C"}, environ=ENVIRON)
    assert (env["IPMI_PASSWORD"], env["LANG"]) == ("bmc-pw", "C")


def test_a_proxy_with_a_password_goes_only_to_tools_that_fetch_through_it(beside):
    environ = {"https_proxy": "http://alice:proxy-pw@proxy.example:3128", "http_proxy": "proxy.example:3128"}
    for tool in ("go", "skopeo", "helm", "kubectl", "git", "rackform"):
        assert tool_environment(tool, environ=environ)["https_proxy"] == environ["https_proxy"], tool
    for tool in ("ansible", "pytest", "ssh", "ipmitool", "maintenance-hook", "an-unlisted-tool"):
        env = tool_environment(tool, environ=environ)
        assert ("https_proxy" not in env, env["http_proxy"]) == (True, "proxy.example:3128"), tool


def test_this_processs_environment_is_the_default(beside, monkeypatch):
    monkeypatch.setenv("RACKFORM_UNIT_TOKEN", "unit-token")
    monkeypatch.setenv("LC_TIME", "C.UTF-8")
    env = tool_environment("kubectl")
    assert "RACKFORM_UNIT_TOKEN" not in env and env["LC_TIME"] == "C.UTF-8"


def test_a_secret_looking_name_is_passed_by_name_only_where_a_tool_is_meant_to_get_it():
    """Taken by prefix, a name that looks like a secret stays here; the few listed by name are the
    secrets a tool is for (docs/security.md): a new one must be added here, on purpose."""
    listed = {name for profile in TOOLS.values() for name in profile.names if looks_secret(name)}
    assert listed == {"RACKFORM_SWITCH_PASSWORD", "PULUMI_ACCESS_TOKEN", "PULUMI_CONFIG_PASSPHRASE", "GOAUTH"}
    assert not {name for name in BASE if looks_secret(name)}
    assert looks_secret("HELM_REPO_PASSWORD") and looks_secret("RACKFORM_API_KEY")
    assert not looks_secret("RACKFORM_VAULT_PASSWORD_FILE") and not looks_secret("SSH_AUTH_SOCK")


def test_docs_explain_every_profile():
    text = (REPO / "docs/security.md").read_text(encoding="utf-8")
    section = text[text.index("## The environment of the processes rackform starts"):]
    assert [tool for tool in TOOLS if f"`{tool}`" not in section] == []
    assert [name for name in sorted(BASE - set(PROXY_NAMES)) if f"`{name}`" not in section] == []


# --------------------------------------------------------------------------- real processes

PRINT_ENVIRONMENT = f"#!{sys.executable}\nimport json, os\nprint(json.dumps(dict(os.environ)))\n"
"""A stand-in tool: prints the environment it was given, as JSON on one line."""
MARKS = {"RACKFORM_UNIT_TOKEN": "unit-token-5b1f", "AWS_SECRET_ACCESS_KEY": "aws-secret-5b1f",
         "RACKFORM_VAULT_PASSWORD": "vault-pw-5b1f", "DATABASE_PASSWORD": "db-pw-5b1f"}


def printed(text: str) -> dict[str, str]:
    """The environment a stand-in printed, from the first `{` of `text` (what rackform says around it)."""
    return json.JSONDecoder().raw_decode(text[text.index("{"):])[0]


@pytest.fixture()
def secrets_here(monkeypatch) -> None:
    """Secrets and allowed names in this process's environment."""
    for name, value in MARKS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/unit/agent.sock")
    monkeypatch.setenv("GOPROXY", "http://goproxy.example")


def assert_clean(env: dict[str, str], *allowed: str) -> None:
    leaked = {name for name, value in env.items() if name in MARKS or value in MARKS.values()}
    assert leaked == set()
    assert env["LC_ALL"] == "C.UTF-8"
    for name in allowed:
        assert name in env, name


def test_the_mirrors_go_gets_its_settings_and_no_secret(tools_beside_rackform, secrets_here):
    from rackform import mirror

    tools_beside_rackform(["go"], PRINT_ENVIRONMENT)
    env = printed(mirror.run(["go", "env"], extra_env={"GOFLAGS": "-mod=readonly"}).stdout)
    assert_clean(env, "GOPROXY", "SSH_AUTH_SOCK")
    assert env["GOFLAGS"] == "-mod=readonly"


def test_the_labs_commands_get_the_base_only(tools_beside_rackform, secrets_here):
    from rackform import lab

    tools_beside_rackform(["ip"], PRINT_ENVIRONMENT)
    env = printed(lab.run(["ip", "link"]).stdout)
    assert_clean(env)
    assert "SSH_AUTH_SOCK" not in env and "GOPROXY" not in env


def test_day_twos_kubectl_gets_no_secret(tools_beside_rackform, secrets_here, tmp_path):
    from rackform.run.cluster import Cluster

    tools_beside_rackform(["kubectl"], PRINT_ENVIRONMENT)
    ok, output = Cluster(tmp_path / "kubeconfig", None).cordon("gpu-1")
    assert ok
    assert_clean(printed(output))


def test_the_fabric_checks_ssh_gets_the_agent_and_no_secret(tools_beside_rackform, secrets_here):
    from rackform.fabric.live import SshTransport, Target

    tools_beside_rackform(["ssh"], PRINT_ENVIRONMENT)
    env = printed(SshTransport().run_script(Target("leaf-1", "cumulus", "10.0.0.1"), "true\n"))
    assert_clean(env, "SSH_AUTH_SOCK")


def test_a_maintenance_hook_gets_the_hosts_facts_and_no_secret(secrets_here, tmp_path):
    from rackform.day2.maintain import run_hook

    hook = tmp_path / "hook"
    hook.write_text(PRINT_ENVIRONMENT)
    hook.chmod(0o755)
    site = types.SimpleNamespace(name="edge")
    host = types.SimpleNamespace(name="gpu-1", management_address="10.0.0.5", bmc_address=None,
                                 block=types.SimpleNamespace(name="rack-a"))
    ok, said = run_hook(hook, site, host)
    env = printed(said.split(": ", 1)[1])
    assert ok
    assert_clean(env, "SSH_AUTH_SOCK")
    assert (env["RACKFORM_HOST"], env["RACKFORM_SITE"], env["RACKFORM_BLOCK"]) == ("gpu-1", "edge", "rack-a")


def test_rackform_inits_git_gets_no_secret_and_no_git_dir(secrets_here, tmp_path, monkeypatch):
    from rackform.commands.init import git_init

    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "git").write_text(PRINT_ENVIRONMENT)
    (folder / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    said = git_init(tmp_path / "repo")
    env = printed(said.split(" is inside the git repository ", 1)[1])
    assert_clean(env)
    assert "GIT_DIR" not in env


def test_the_stage_process_gets_what_rackform_needs_and_no_secret(secrets_here, tmp_path, monkeypatch):
    """The Pulumi provider's stage process (rackform.run.stage_process), started for real: a
    sitecustomize on PYTHONPATH writes down the environment it starts with."""
    from rackform.run.stage_process import run_stage_in_fresh_process

    folder = tmp_path / "site-packages"
    folder.mkdir()
    seen = tmp_path / "seen.json"
    (folder / "sitecustomize.py").write_text(
        f"import json, os\nopen({str(seen)!r}, 'w').write(json.dumps(dict(os.environ)))\n")
    monkeypatch.setenv("PYTHONPATH", f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}".rstrip(os.pathsep))
    monkeypatch.setenv("PULUMI_ACCESS_TOKEN", "pulumi-token-5b1f")
    monkeypatch.setenv("RACKFORM_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("RACKFORM_SWITCH_PASSWORD", "switch-pw-5b1f")
    with pytest.raises(Exception):  # noqa: B017 - no such site: what the stage did is not the point here
        run_stage_in_fresh_process("no-such-site", tmp_path, "os", envvars={}, left_out=(), via="pulumi",
                                   cancel_requested=lambda: False)
    env = json.loads(seen.read_text())
    assert_clean(env, "SSH_AUTH_SOCK", "PYTHONPATH")
    assert "PULUMI_ACCESS_TOKEN" not in env
    assert (env["RACKFORM_STATE_DIR"], env["RACKFORM_SWITCH_PASSWORD"]) == (str(tmp_path / "state"), "switch-pw-5b1f")

