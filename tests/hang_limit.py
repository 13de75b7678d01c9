"""How long a test lets a child process (ansible-playbook, ansible-lint, pip) run before it
calls it hung.

Not a speed check: ansible-lint of the lab's project takes 89 s alone on 2 cores, and several
times that while other suites load the machine, so a limit near those figures fails healthy
runs. This one only ends a child that will never finish (a prompt nobody answers, a lost
connection), so the test still stops and names its command. Speed is measured in bench/.
"""

SUBPROCESS_HANG_S = 1800
