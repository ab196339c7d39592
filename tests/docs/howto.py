"""Run a documentation page's commands in order, as a reader following it would.

A page stays plain markdown; what the runner needs to know is said in HTML comments,
invisible once rendered, of the form ``<!-- howto: WORD ... -->`` on a line of their
own. Shell blocks (``sh``, ``console``) run by default: each command in a fresh
``bash`` whose variables carry over to the next command (``B=...`` then ``$B``), in one
temporary directory per page that holds links to the checkout's ``.venv`` (and whatever
``links`` names), with ``.venv/bin`` first on the PATH. A command that exits non-zero
fails the page, naming the page's line, the command and its output. In ``console``
blocks the output shown under each ``$ command`` must appear in what it printed, line by
line in order (whitespace and decimal fractions, i.e. timings, aside; the password
prompts the runner answers aside).

Words before a block (several joined by ``;``) apply to it:

- ``background``: each command runs in the background, as in "in another terminal",
  its output kept for ``wait``; ``pid VAR[,VAR...]`` exports each one's process id.
- ``retry [SECONDS]``: run each command again until it succeeds (default 30 s), for a
  command the reader runs "a moment later".
- ``expect-fail``: each command must exit non-zero.
- ``output-varies``: do not compare the output shown (leaders, timings, ids).
- ``stdin TEXT``: each command reads TEXT as its first line of input (a password prompt).
- ``env NAME=VALUE``: in each command's environment.
- ``timeout SECONDS``: for each command (default 120).
- ``instead COMMAND``: run COMMAND in place of the block's one command.
- ``instead-kill VAR``: SIGKILL the background command whose pid is ``$VAR`` in place of
  the block's one command (a ``pkill -9 -f`` a reader may run at home, but a test, on a
  machine others share, must not); VAR is expanded by the shell first.
- ``skip REASON``: not run; REASON says why (docker, placeholders).
- ``covered-by FILE::TEST``: the block's ``groupwire`` command is only parsed here, by
  groupwire's own parser as it would be run (variables and ports expanded), because TEST
  runs the same command in full and checks what it does, which would take long here
  again. TEST must exist and pass every flag the page's command uses, itself or in a
  fixture of its module it takes: so a flag the page misspells, a value the parser
  refuses, or a cover that no longer covers, fails the page.
- ``save FILE`` (python): write the block to FILE; ``python``: run it.

``above: WORDS`` after a block gives it WORDS, where nothing may stand before it (the
README's first lines).

Words on their own, acted on where they stand:

- ``ports N N ...`` (once, anywhere): the page says the reader may pick these ports;
  the runner replaces each by a free one throughout the page.
- ``links PATH ...``: link these paths of the checkout into the directory.
- ``needs TOOL``: skip the rest of the section (the whole page before its first ``##``)
  when TOOL is not on the PATH.
- ``until COMMAND``: run COMMAND until it exits 0 (readiness, 60 s at most).
- ``wait VAR TEXT``: until the background command whose pid is ``$VAR`` has printed
  TEXT since the last ``wait`` on it.
- ``run COMMAND`` / ``start COMMAND [-> VAR]``: a command the page does not show, in
  the foreground / the background (the page says it in prose: "with a broker running").
- ``stop VAR`` / ``restart VAR``: SIGTERM (then SIGKILL) the background command whose
  pid is ``$VAR`` / and start it again under the same variable; VAR is expanded by the
  shell first, so ``restart BROKER${LEADER}_PID`` works.

Every background process the page started is killed (its whole process group) when
the page ends, pass or fail.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"

DIRECTIVE = re.compile(r"^\s*<!--\s*howto:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)\s*$")
HEADING = re.compile(r"^(#{1,6})\s")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
PROMPT = re.compile(r"^(SASL )?password for \S+( \(again\))?:$")
DECIMAL = re.compile(r"\d+\.\d+")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")

BLOCK_WORDS = frozenset({"background", "pid", "retry", "expect-fail", "output-varies",
                         "stdin", "env", "timeout", "instead", "instead-kill", "skip", "save",
                         "python", "covered-by"})
ACTION_WORDS = frozenset({"ports", "links", "needs", "until", "wait", "run", "start",
                          "stop", "restart"})
SHELL_LANGS = frozenset({"sh", "bash", "shell", "console"})

COMMAND_TIMEOUT_S = 120.0
RETRY_S = 30.0
UNTIL_S = 60.0
POLL_S = 0.2
STOP_GRACE_S = 15.0
SHOWN_OUTPUT_CHARS = 4000
PARSE_ONLY = ("import sys; from groupwire.cli.main import build_parser, command_of; "
              "words = sys.argv[1:]; command = command_of(words); "
              "build_parser(load=() if command is None else (command,)).parse_args(words); "
              "print('parsed: groupwire', command)")
"""``python -c PARSE_ONLY ARGS``: what ``groupwire ARGS`` does before it runs anything
(groupwire.cli.main.main); argparse exits 2 naming a bad flag or value."""


class HowtoError(AssertionError):
    """A page's step failed: the message names the line, the command and its output."""


class PageSkipped(Exception):
    """The whole page needs a tool that is not here."""


@dataclass
class Command:
    text: str
    expected: list[str]


@dataclass
class Block:
    line: int
    lang: str
    body: str
    attrs: dict[str, str]
    section: int

    def commands(self) -> list[Command]:
        return list(parse_shell(self.body, console=self.lang == "console"))


@dataclass
class Action:
    line: int
    word: str
    arg: str
    section: int


Step = Block | Action


@dataclass
class Page:
    path: Path
    steps: list[Step]
    ports: list[int]
    links: list[str]


# --- parsing -------------------------------------------------------------------------------


def parse_shell(body: str, console: bool) -> Iterator[Command]:
    """Commands of a shell block: ``$ `` lines in a console block (the lines after one
    are its output), every line elsewhere; a trailing backslash or a heredoc carries a
    command over several lines."""
    lines = body.splitlines()
    i = 0
    current: Command | None = None
    while i < len(lines):
        line = lines[i]
        i += 1
        if console and not line.startswith("$ "):
            if current is not None and line.strip():
                current.expected.append(line)
            continue
        text = line[2:] if console else line
        if not console and (not text.strip() or text.lstrip().startswith("#")):
            continue
        parts = [text]
        while parts[-1].endswith("\\") and i < len(lines):
            parts.append(lines[i])
            i += 1
        heredoc = HEREDOC.search("\n".join(parts))
        if heredoc is not None:
            while i < len(lines):
                parts.append(lines[i])
                i += 1
                if parts[-1].strip() == heredoc.group(2):
                    break
        current = Command("\n".join(parts), [])
        yield current


def parse_attrs(text: str) -> dict[str, str]:
    """``word rest; word rest``; ``skip`` and ``instead`` take the rest of the line,
    semicolons and all, so they come last."""
    attrs: dict[str, str] = {}
    while text.strip():
        found = re.match(r"\s*([\w-]+)(.*)", text, re.DOTALL)
        word, rest = (found.group(1), found.group(2)) if found else (text.strip(), "")
        if word not in BLOCK_WORDS:
            raise ValueError(f"unknown howto word {word!r}")
        if word in ("skip", "instead", "instead-kill"):
            attrs[word] = rest.strip()
            break
        value, _, text = rest.partition(";")
        attrs[word] = value.strip()
    return attrs


def parse_page(path: Path, ports: dict[int, int] | None = None) -> Page:
    """The page's steps; ``ports`` maps the page's ports to the ones to use instead."""
    text = path.read_text()
    listed = [int(p) for m in re.finditer(r"<!--\s*howto:\s*ports\s+([\d\s]+?)\s*-->", text)
              for p in m.group(1).split()]
    if ports is not None:
        for old, new in ports.items():
            text = re.sub(rf"(?<![\d.]){old}(?!\d)", str(new), text)
    steps: list[Step] = []
    links: list[str] = []
    pending: dict[str, str] = {}
    pending_line = 0
    section = 0
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if HEADING.match(line) and not line.startswith("# "):
            section += 1
            continue
        directive = DIRECTIVE.match(line)
        if directive is not None:
            word, _, rest = directive.group(1).partition(" ")
            if word == "above:":
                if not steps or not isinstance(steps[-1], Block) or steps[-1].attrs:
                    raise HowtoError(f"{path.name}:{i}: `above:` follows no block of its own")
                steps[-1].attrs = parse_attrs(rest)
                continue
            if word in ACTION_WORDS:
                if word == "links":
                    links.extend(rest.split())
                elif word != "ports":
                    steps.append(Action(i, word, rest.strip(), section))
            else:
                try:
                    pending.update(parse_attrs(directive.group(1)))
                except ValueError as exc:
                    raise HowtoError(f"{path.name}:{i}: {exc}") from None
                pending_line = i
            continue
        fence = FENCE.match(line)
        if fence is None:
            continue
        indent, marks, lang = fence.groups()
        start = i
        body: list[str] = []
        while i < len(lines) and not lines[i].strip().startswith(marks):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        if pending and pending_line < start - 2:
            raise HowtoError(f"{path.name}:{pending_line}: howto words not right before a block")
        steps.append(Block(start, lang, "\n".join(body) + "\n", pending, section))
        pending = {}
    return Page(path, steps, listed, links)


def cover_problem(spec: str, command: str) -> str | None:
    """Why the test ``spec`` (``FILE::TEST``) does not cover ``command``, or None: the
    test must exist, and every flag of ``command`` must be a string in its source or in
    a fixture of its module it takes (how it passes the flag to the same command)."""
    file, sep, name = spec.partition("::")
    path = ROOT / file
    if not sep or not path.is_file():
        return f"covered-by {spec}: no such test file (FILE::TEST)"
    tree = ast.parse(path.read_text())
    functions = {node.name: node for node in tree.body
                 if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    test = functions.get(name)
    if test is None or not name.startswith("test"):
        return f"covered-by {spec}: {file} has no test {name}"
    read = [test, *(functions[a.arg] for a in test.args.args if a.arg in functions)]
    strings = {node.value for function in read for node in ast.walk(function)
               if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    words = shlex.split(command.replace("\\\n", " "), comments=True)
    flags = [w.split("=", 1)[0] for w in words if w.startswith("--")]
    missing = [flag for flag in flags if flag not in strings]
    if missing:
        return f"covered-by {spec}: the test does not pass {', '.join(missing)}"
    return None


def free_ports(count: int) -> list[int]:
    """Distinct ports free on the loopback right now."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


# --- running -------------------------------------------------------------------------------


def normalized(line: str) -> str:
    return DECIMAL.sub("#", " ".join(line.split()))


def missing_output(expected: list[str], printed: str) -> list[str]:
    """The expected lines not found, in order, among the printed ones."""
    want = [normalized(line) for line in expected if not PROMPT.match(line.strip())]
    got = iter(normalized(line) for line in printed.splitlines())
    missing = []
    for line in want:
        if not any(line == seen for seen in got):
            missing.append(line)
            got = iter(normalized(line) for line in printed.splitlines())
    return missing


def tail(text: str, chars: int = SHOWN_OUTPUT_CHARS) -> str:
    return text if len(text) <= chars else "...\n" + text[-chars:]


@dataclass
class Background:
    command: str
    var: str | None
    log: Path
    proc: subprocess.Popen[bytes]
    read_to: int = 0
    stopped: bool = False

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Run:
    """One page's run: its directory, shell state and background processes."""

    page: Page
    workdir: Path
    skipped: list[str] = field(default_factory=list)
    background: list[Background] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.meta = self.workdir / ".howto"
        self.meta.mkdir(parents=True)
        self.state = self.meta / "state.sh"
        self.state.write_text("")
        (self.workdir / ".venv").symlink_to(ROOT / ".venv")
        for link in self.page.links:
            (self.workdir / link).parent.mkdir(parents=True, exist_ok=True)
            (self.workdir / link).symlink_to(ROOT / link)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GROUPWIRE_", "PYSPARK_", "VIRTUAL_ENV", "PYTEST_"))}
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONUNBUFFERED"] = "1"
        env["HOWTO_STATE"] = str(self.state)
        self.env = env
        self.counter = 0

    # the shell

    def script(self, command: str, background: bool = False,
               env: dict[str, str] | None = None) -> str:
        """``command`` in a bash that reads the variables earlier commands left and
        exports every assignment (``set -a``) so the next command sees it; ``env`` is
        this command's only, not left to the next."""
        env = env or {}
        given = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        if background:
            first = command.split(maxsplit=1)[0] if command.strip() else ""
            run = command if ASSIGNMENT.match(first) else f"exec {command}"
            return f'set -a\n. "$HOWTO_STATE"\n{given}{run}\n'
        forget = "".join(f"unset {k}\n" for k in env)
        return (f'set -a\n. "$HOWTO_STATE"\n{given}{command}\n__howto_rc=$?\n'
                f'{forget}export -p > "$HOWTO_STATE"\nexit $__howto_rc\n')

    def shell(self, command: str, stdin: str | None = None, env: dict[str, str] | None = None,
              timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str]:
        try:
            done = subprocess.run(
                ["bash", "-c", self.script(command, env=env)], cwd=self.workdir,
                env=self.env, input=(stdin or "").encode(),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            code = -1
            printed = ((exc.output or b"").decode(errors="replace")
                       + f"\n[howto: still running after {timeout:g} s]")
        else:
            code, printed = done.returncode, done.stdout.decode(errors="replace")
        self.note(f"$ {command}\n{printed}[exit {code}]")
        return code, printed

    def note(self, text: str) -> None:
        """Into .howto/transcript.txt, what ran and when (UTC), for reading after a run."""
        stamp = time.strftime("%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}"
        with (self.meta / "transcript.txt").open("a") as transcript:
            transcript.write(f"[{stamp}] {text}\n")

    def expand(self, text: str) -> str:
        code, out = self.shell(f"printf '%s' {text}")
        if code != 0:
            self.fail(0, f"cannot expand {text!r}", out)
        return out

    def set_var(self, name: str, value: str) -> None:
        with self.state.open("a") as f:
            f.write(f"declare -x {name}={shlex.quote(value)}\n")

    # failures

    def fail(self, line: int, what: str, output: str = "") -> None:
        logs = []
        for bg in self.background:
            status = "running" if bg.proc.poll() is None else f"exited {bg.proc.returncode}"
            logs.append(f"--- background ({status}): {bg.command}\n{tail(bg.output(), 1500)}")
        raise HowtoError("\n".join([f"{self.page.path.name}:{line}: {what}",
                                    "--- output:", tail(output), *logs]))

    def check_background(self, line: int) -> None:
        for bg in self.background:
            if not bg.stopped and bg.proc.poll() is not None:
                self.fail(line, f"the background command {bg.command!r} exited "
                                f"{bg.proc.returncode}")

    # steps

    def run(self) -> None:
        missing_section: int | None = None
        for step in self.page.steps:
            if missing_section is not None and step.section == missing_section:
                continue
            missing_section = None
            if isinstance(step, Action):
                if step.word == "needs" and shutil.which(step.arg) is None:
                    if step.section == 0:
                        raise PageSkipped(f"{step.arg} is not on the PATH")
                    self.skipped.append(f"line {step.line}: section without {step.arg}")
                    missing_section = step.section
                    continue
                self.act(step)
            else:
                self.block(step)

    def act(self, step: Action) -> None:
        if step.word == "needs":
            return
        if step.word == "until":
            deadline = time.monotonic() + UNTIL_S
            while True:
                code, out = self.shell(step.arg)
                if code == 0:
                    return
                self.check_background(step.line)
                if time.monotonic() > deadline:
                    self.fail(step.line, f"not true within {UNTIL_S:g} s: {step.arg}", out)
                time.sleep(POLL_S)
        if step.word == "wait":
            var, _, text = step.arg.partition(" ")
            bg = self.named(step.line, var)
            deadline = time.monotonic() + UNTIL_S
            while True:
                printed = bg.output()
                found = printed.find(text, bg.read_to)
                if found >= 0:
                    bg.read_to = found + len(text)
                    return
                if bg.proc.poll() is not None or time.monotonic() > deadline:
                    self.fail(step.line, f"{bg.command!r} did not print {text!r}",
                              printed[bg.read_to:])
                time.sleep(POLL_S)
        if step.word == "run":
            code, out = self.shell(step.arg)
            if code != 0:
                self.fail(step.line, f"exit status {code}: {step.arg}", out)
            return
        if step.word == "start":
            command, _, var = step.arg.partition(" -> ")
            self.start(command, var.strip() or None)
            return
        if step.word in ("stop", "restart"):
            bg = self.named(step.line, self.expand(step.arg), stopped=step.word == "restart")
            self.stop(bg)
            if step.word == "restart":
                self.start(bg.command, bg.var)
            return
        raise HowtoError(f"{self.page.path.name}:{step.line}: unknown word {step.word!r}")

    def named(self, line: int, var: str, stopped: bool = False) -> Background:
        """The background command last started under ``var``; a stopped one too if
        ``stopped`` (to restart it)."""
        for bg in reversed(self.background):
            if bg.var == var and (stopped or not bg.stopped):
                return bg
        self.fail(line, f"no background command with its pid in ${var}")
        raise AssertionError  # unreachable: fail raises

    def start(self, command: str, var: str | None) -> None:
        self.counter += 1
        log = self.meta / f"background-{self.counter}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(["bash", "-c", self.script(command, background=True)],
                                    cwd=self.workdir, env=self.env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.note(f"started {command} (pid {proc.pid}, output in {log.name})")
        self.background.append(Background(command, var, log, proc))
        if var is not None:
            self.set_var(var, str(proc.pid))

    def stop(self, bg: Background, sig: signal.Signals = signal.SIGTERM) -> None:
        """``sig`` (SIGTERM) to the process group, SIGKILL to what lingers."""
        self.note(f"{sig.name} to {bg.command}")
        if bg.proc.poll() is None:
            try:
                os.killpg(bg.proc.pid, sig)
                bg.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(bg.proc.pid, signal.SIGKILL)
        bg.proc.wait()
        bg.stopped = True

    def close(self) -> None:
        for bg in reversed(self.background):
            self.stop(bg)

    def block(self, block: Block) -> None:
        attrs = block.attrs
        if "skip" in attrs:
            self.skipped.append(f"line {block.line}: {attrs['skip'] or 'skipped'}")
            return
        if block.lang == "python":
            self.python(block)
            return
        if block.lang not in SHELL_LANGS:
            if attrs:
                raise HowtoError(f"{self.page.path.name}:{block.line}: howto words on a "
                                 f"{block.lang or 'plain'} block, which is never run")
            return
        commands = block.commands()
        if "covered-by" in attrs:
            for command in commands:
                self.parse_only(block, command)
            return
        if "instead-kill" in attrs:
            bg = self.named(block.line, self.expand(attrs["instead-kill"]))
            self.stop(bg, signal.SIGKILL)
            return
        if "instead" in attrs:
            if len(commands) != 1:
                raise HowtoError(f"{self.page.path.name}:{block.line}: `instead` needs a "
                                 "block of one command")
            commands = [Command(attrs["instead"], commands[0].expected)]
        if "background" in attrs:
            names = [n.strip() for n in attrs.get("pid", "").split(",") if n.strip()]
            for n, command in enumerate(commands):
                self.start(command.text, names[n] if n < len(names) else None)
            return
        for command in commands:
            self.foreground(block, command)

    def foreground(self, block: Block, command: Command) -> None:
        attrs = block.attrs
        env = dict([attrs["env"].split("=", 1)]) if "env" in attrs else None
        stdin = attrs["stdin"] + "\n" if "stdin" in attrs else None
        timeout = float(attrs.get("timeout") or COMMAND_TIMEOUT_S)
        expect_fail = "expect-fail" in attrs
        compare = block.lang == "console" and "output-varies" not in attrs
        retry_s = float(attrs["retry"] or RETRY_S) if "retry" in attrs else 0.0
        deadline = time.monotonic() + retry_s
        while True:
            code, out = self.shell(command.text, stdin, env, timeout)
            problem = None
            if expect_fail and code == 0:
                problem = "exit status 0 where the page expects a failure"
            elif not expect_fail and code != 0:
                problem = f"exit status {code}"
            elif compare:
                missing = missing_output(command.expected, out)
                if missing:
                    problem = "the output differs from the page's; missing:\n  " + \
                        "\n  ".join(missing)
            if problem is None:
                return
            self.check_background(block.line)
            if time.monotonic() >= deadline:
                self.fail(block.line, f"{problem}\n--- command:\n{command.text}", out)
            time.sleep(POLL_S)

    def parse_only(self, block: Block, command: Command) -> None:
        """``covered-by``: the command through groupwire's parser, not run."""
        problem = cover_problem(block.attrs["covered-by"], command.text)
        if problem is not None:
            self.fail(block.line, problem)
        program, _, rest = command.text.lstrip().partition(" ")
        if program != "groupwire" and not program.endswith("/groupwire"):
            self.fail(block.line, f"covered-by: not a groupwire command: {command.text}")
        code, out = self.shell(f"python -c {shlex.quote(PARSE_ONLY)} {rest}")
        if code != 0:
            self.fail(block.line, f"groupwire's parser refuses the command (exit {code})\n"
                                  f"--- command:\n{command.text}", out)

    def python(self, block: Block) -> None:
        attrs = block.attrs
        if not attrs:
            raise HowtoError(f"{self.page.path.name}:{block.line}: a python block needs "
                             "`save FILE`, `python` or `skip REASON`")
        target = attrs.get("save")
        if target:
            (self.workdir / target).write_text(block.body)
        if "python" in attrs:
            self.counter += 1
            script = target or f".howto/block-{block.line}.py"
            if not target:
                (self.workdir / script).write_text(block.body)
            self.foreground(Block(block.line, "sh", "", attrs, block.section),
                            Command(f"python {script}", []))


def run_page(path: Path, workdir: Path) -> list[str]:
    """Run the page's steps in ``workdir``; the steps it skipped, with their reasons.
    Raises HowtoError on a failed step, PageSkipped when the page needs a missing tool."""
    listed = parse_page(path).ports
    page = parse_page(path, dict(zip(listed, free_ports(len(listed)), strict=True)))
    run = Run(page, workdir)
    try:
        run.run()
    finally:
        run.close()
    return run.skipped
