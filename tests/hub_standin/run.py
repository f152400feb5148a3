"""Runner of the Hub stand-in: the server's virtualenv, ``serve()`` and the command line (see ``__init__``)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[1]
VENV = PROJECT / ".venv-hub"
REQUIREMENTS = HERE / "requirements.txt"
STAMP = VENV / ".installed"
GUARD = HERE / "guard"
# Variables that would make a client skip the stand-in, read another cache, or send a real token.
CLEARED = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
           "HF_TOKEN_PATH", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_DATASETS_CACHE",
           "HF_XET_CACHE", "HF_ASSETS_CACHE", "ANISOTROPY_ENWIK8")


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv(quiet: bool = True) -> Path:
    """Create ``.venv-hub`` from the pinned requirements if missing or stale; returns its python. Idempotent: the
    stamp ``.venv-hub/.installed`` holds the SHA-256 of the requirements it was installed from."""
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if STAMP.is_file() and STAMP.read_text().strip() == want and venv_python().is_file():
        STAMP.touch()  # for make: newer than the requirements
        return venv_python()
    if not venv_python().is_file():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(venv_python()), "-m", "pip", "--disable-pip-version-check", *(["-q"] if quiet else [])]
    subprocess.run([*pip, "install", "-r", str(REQUIREMENTS)], check=True)
    STAMP.write_text(want + "\n")
    return venv_python()


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class StandIn:
    """A running stand-in: ``endpoint`` (``http://127.0.0.1:PORT``), ``root`` (the populated repositories),
    ``manifest`` (what is served), ``state`` (log, port file, olah's cache), ``hf_home`` (a fresh client cache)."""

    endpoint: str
    root: Path
    manifest: dict
    state: Path
    hf_home: Path
    accepted_tokens: tuple[str, ...] = ()
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def enwik8_url(self) -> str:
        f = self.manifest["files"]["enwik8"]
        return f"{self.endpoint}{f['path']}#sha256={f['sha256']}"

    @property
    def log_path(self) -> Path:
        return self.state / "requests.jsonl"

    @property
    def guard_log(self) -> Path:
        return self.state / "guard.log"

    def env(self, base: dict | None = None, hf_home: str | os.PathLike | None = None,
            token: str | None = None) -> dict[str, str]:
        """The environment of a client process: ``base`` (default ``os.environ``) without offline flags, tokens and
        cache overrides (``CLEARED``), plus ``HF_ENDPOINT``, ``HF_HOME`` (this stand-in's fresh cache unless given),
        ``HF_HUB_DISABLE_TELEMETRY=1``, ``HF_UPDATE_DOWNLOAD_COUNTS=0``, ``ANISOTROPY_ENWIK8_URL=<url>#sha256=<hex>``,
        ``NO_PROXY`` for loopback, and the loopback guard on ``PYTHONPATH``. ``token`` sets ``HF_TOKEN``."""
        env = {k: v for k, v in (os.environ if base is None else base).items() if k not in CLEARED}
        env.update(
            HF_ENDPOINT=self.endpoint,
            HF_HOME=str(hf_home or self.hf_home),
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_UPDATE_DOWNLOAD_COUNTS="0",  # datasets would otherwise ping an S3 bucket per load
            ANISOTROPY_ENWIK8_URL=self.enwik8_url,
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
            PYTHONPATH=os.pathsep.join([str(GUARD), *filter(None, [env.get("PYTHONPATH")])]),
            HUBSTANDIN_GUARD_LOG=str(self.guard_log),
        )
        if token is not None:
            env["HF_TOKEN"] = token
        return env

    def requests(self) -> list[dict]:
        """The request log so far: one dict per request (method, path, query, repo_type, repo_id, revision, file,
        commit, status, error = the X-Error-Code)."""
        if not self.log_path.is_file():
            return []
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]

    def refused_hosts(self) -> list[str]:
        """Hosts that the guard kept client processes from reaching."""
        if not self.guard_log.is_file():
            return []
        return sorted({line.split(" refused ", 1)[1] for line in self.guard_log.read_text().splitlines()})


@contextmanager
def serve(root: str | os.PathLike | None = None, gated_tokens=(), port: int = 0, startup_timeout: float = 600.0):
    """Build (or reuse) the repositories, start the server on 127.0.0.1 (``port`` 0 = a free one), wait until it
    answers, yield a ``StandIn``, and stop the server on exit. ``gated_tokens`` are the tokens that may read the
    gated repositories; ``root`` serves an already populated folder instead of the cached paper build.
    ``startup_timeout`` is a hang guard: the server starts in about 10 s on a slow, busy 2-core machine."""
    python = ensure_venv()
    if root is None:
        from .build import ensure_built  # heavy imports only when building

        root = ensure_built()
    root = Path(root).resolve()
    manifest = json.loads((root / "manifest.json").read_text())
    state = Path(tempfile.mkdtemp(prefix="hub-standin-"))
    (state / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in CLEARED and not k.startswith("OLAH")}
    env.update(HOME=str(state / "home"), HUBSTANDIN_ACCEPTED_TOKENS=json.dumps(list(gated_tokens)),
               PYTHONPATH=str(GUARD), HUBSTANDIN_GUARD_LOG=str(state / "guard.log"), PYTHONUNBUFFERED="1")
    out = open(state / "server.log", "wb")
    proc = subprocess.Popen([str(python), str(HERE / "server.py"), "--root", str(root), "--state", str(state),
                             "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, cwd=state)
    try:
        deadline = time.time() + startup_timeout
        port_file = state / "port"
        while not port_file.is_file():
            if proc.poll() is not None or time.time() > deadline:
                guard = f"; hang guard: {startup_timeout:.0f} s, against about 10 expected" if proc.poll() is None else ""
                raise RuntimeError(f"the hub stand-in did not start (exit {proc.poll()}{guard}); its log:\n"
                                   + (state / "server.log").read_text()[-3000:])
            time.sleep(0.05)
        endpoint = f"http://127.0.0.1:{int(port_file.read_text())}"
        while not _http_ok(f"{endpoint}/api/models/{manifest['models'][0]['repo']}"):
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the hub stand-in does not answer (hang guard: {startup_timeout:.0f} s, against "
                                   "about 10 expected); its log:\n"
                                   + (state / "server.log").read_text()[-3000:])
            time.sleep(0.05)
        yield StandIn(endpoint, root, manifest, state, state / "hf-home", tuple(gated_tokens), proc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()
        shutil.rmtree(state, ignore_errors=True)


def _shell_lines(env: dict, standin: StandIn) -> str:
    keys = ("HF_ENDPOINT", "HF_HOME", "HF_HUB_DISABLE_TELEMETRY", "HF_UPDATE_DOWNLOAD_COUNTS", "ANISOTROPY_ENWIK8_URL",
            "NO_PROXY", "no_proxy", "PYTHONPATH", "HUBSTANDIN_GUARD_LOG")
    lines = [f"export {k}={shlex.quote(env[k])}" for k in keys] + [f"unset {k}" for k in CLEARED if k in os.environ]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python tests/hub_standin",
                                description="Local Hugging Face Hub stand-in serving the paper profile's repos.")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve until interrupted; prints the endpoint and the client environment")
    r = sub.add_parser("run", help="run a command with the client environment, e.g. run -- make book PROFILE=...")
    for q in (s, r):
        q.add_argument("--port", type=int, default=0)
        q.add_argument("--accept-token", action="append", default=[], help="token that may read gated repos")
        q.add_argument("--root", help="serve this populated folder instead of the cached paper build")
    r.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("build", help="build (or reuse) the repositories and print their folder")
    sub.add_parser("venv", help="create .venv-hub from the pinned requirements (idempotent)")
    args = p.parse_args(argv)
    if args.cmd == "venv":
        print(ensure_venv(quiet=False))
        return 0
    if args.cmd == "build":
        from .build import ensure_built

        t = time.time()
        root = ensure_built()
        print(root)
        print(f"({time.time() - t:.1f} s)", file=sys.stderr)
        return 0
    command = args.command[1:] if args.cmd == "run" and args.command[:1] == ["--"] else getattr(args, "command", [])
    if args.cmd == "run" and not command:
        p.error("run needs a command after --")
    with serve(args.root, args.accept_token, args.port) as standin:
        env = standin.env()
        if args.cmd == "serve":
            print(f"hub stand-in at {standin.endpoint} (repositories: {standin.root}; requests: {standin.log_path})")
            print(_shell_lines(env, standin), flush=True)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
            return 0
        print(f"hub stand-in at {standin.endpoint}: running {' '.join(command)}", file=sys.stderr, flush=True)
        return subprocess.run(command, env=env).returncode

