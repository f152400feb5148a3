"""The Hub stand-in's server: olah (offline, serving the populated root as its mirror) behind a thin ASGI layer.

Runs in ``.venv-hub`` (olah and its dependencies), started by ``run.serve``:

    .venv-hub/bin/python tests/hub_standin/server.py --root ROOT --state DIR [--port 0]

It listens on 127.0.0.1 only, writes the bound port to ``DIR/port`` once listening, and appends one JSON line per
request to ``DIR/requests.jsonl``. Accepted tokens for gated repositories come from ``HUBSTANDIN_ACCEPTED_TOKENS``
(a JSON list). The layer answers only what olah cannot, and hands everything else to olah with the revision
replaced by its commit hash:

- revisions are decoded from the raw path (``refs%2Fconvert%2Fparquet``) and resolved to the commit of the branch,
  tag or ``refs/...`` ref (olah routes on the decoded path and resolves branches only from its own cache offline);
- ``/api/{type}/{id}`` without a revision is answered as ``.../revision/<main commit>``;
- a missing repository: 401 ``RepoNotFound``; a missing revision: 404 ``RevisionNotFound``; a missing file or tree
  path: 404 ``EntryNotFound`` (olah answers 401 for a missing file on a branch);
- a gated repository's files: 401 ``GatedRepo`` without a token, 403 ``GatedRepo`` with one not accepted;
- ``/dc/enwik8.zip``: the plain file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote, unquote

REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
API_VERBS = {"revision", "tree", "paths-info", "commits", "refs", "xet-read-token", "preupload", "commit"}


def _error(status: int, code: str, message: str) -> tuple[int, dict, bytes]:
    body = json.dumps({"error": message}).encode()
    return status, {"x-error-code": code, "x-error-message": message, "content-type": "application/json"}, body


class Repos:
    """Git look-ups in the populated root: which repositories exist, their refs, and what a commit contains."""

    def __init__(self, root: Path):
        import git  # GitPython, a dependency of olah

        self._git = git
        self.root = root
        manifest = json.loads((root / "manifest.json").read_text())
        self.gated = {e["repo"] for e in manifest["models"] if e.get("gated")}
        self._repos: dict[tuple[str, str], object] = {}
        self._commits: dict[tuple[str, str, str], str | None] = {}  # repositories do not change while served
        self._lock = threading.Lock()

    def get(self, kind: str, repo_id: str):
        key = (kind, repo_id)
        with self._lock:
            if key not in self._repos:
                path = self.root / kind / repo_id
                ok = path.is_dir() and (path / "HEAD").is_file() and ".." not in repo_id.split("/")
                self._repos[key] = self._git.Repo(path) if ok else None
            return self._repos[key]

    def exists(self, kind: str, repo_id: str) -> bool:
        return self.get(kind, repo_id) is not None

    def resolve(self, kind: str, repo_id: str, revision: str) -> str | None:
        """The commit of a branch, tag, full ref (``refs/convert/parquet``) or full commit hash; None if unknown."""
        key = (kind, repo_id, revision)
        if key not in self._commits:
            self._commits[key] = self._resolve(self.get(kind, repo_id), revision)
        return self._commits[key]

    def _resolve(self, repo, revision: str) -> str | None:
        refs = {r.path: r for r in repo.references}
        for name in (f"refs/heads/{revision}", f"refs/tags/{revision}", revision):
            if name.startswith("refs/") and name in refs:
                return refs[name].commit.hexsha
        if len(revision) == 40 and all(c in "0123456789abcdef" for c in revision.lower()):
            try:
                return repo.commit(revision.lower()).hexsha
            except (ValueError, self._git.BadName, self._git.BadObject):
                return None
        return None

    def kind_of(self, kind: str, repo_id: str, commit: str, path: str) -> str | None:
        """"blob", "tree" or None (missing) for ``path`` at ``commit``; the empty path is the root tree."""
        tree = self.get(kind, repo_id).commit(commit).tree
        if not path.strip("/"):
            return "tree"
        try:
            return tree[path.strip("/")].type
        except KeyError:
            return None


class StandInApp:
    """ASGI layer in front of olah's app (see the module docstring)."""

    def __init__(self, olah_app, root: Path, log: Path, accepted_tokens: set[str]):
        self.olah = olah_app
        self.repos = Repos(root)
        self.files = {"/dc/enwik8.zip": root / "files" / "dc" / "enwik8.zip"}
        self.accepted = accepted_tokens
        self.log = open(log, "a", buffering=1)
        self.log_lock = threading.Lock()

    # --- parsing -------------------------------------------------------------------------------------------------

    def _split_id(self, kind: str, segs: list[str]) -> tuple[str, list[str]]:
        """(repo id, remaining segments): "org/name" when that repository exists or the second segment is not a
        verb; else the one-segment id of a repository without an org (gpt2, bert-base-uncased)."""
        if len(segs) >= 2 and (self.repos.exists(kind, "/".join(segs[:2]))
                               or (segs[1] not in API_VERBS and segs[1] != "resolve"
                                   and not self.repos.exists(kind, segs[0]))):
            return "/".join(segs[:2]), segs[2:]
        return segs[0], segs[1:]

    def parse(self, raw_path: str) -> dict:
        """What a request asks for; ``rewrite(commit)`` gives olah's path with the revision replaced."""
        segs = raw_path.split("/")[1:]  # still percent-encoded: a %2F in a revision stays inside its segment
        dec = [unquote(s) for s in segs]
        if dec and dec[0] == "api" and len(dec) >= 3 and dec[1] in REPO_TYPES and dec[1] != "spaces":
            kind = dec[1]
            repo_id, rest = self._split_id(kind, dec[2:])
            rest_raw = segs[len(segs) - len(rest):] if rest else []
            req = dict(kind=kind, repo=repo_id, route="api", verb=rest[0] if rest else "info",
                       revision=None, path=None)
            if not rest:  # /api/{type}/{id}: the main branch
                req["revision"] = "main"
                req["rewrite"] = lambda c: f"/api/{kind}/{repo_id}/revision/{c}"
            elif rest[0] in ("revision", "tree", "commits", "paths-info") and len(rest) >= 2:
                req["revision"] = rest[1]
                req["path"] = "/".join(rest[2:]) if rest[0] == "tree" else None
                tail = "/".join(rest_raw[2:])
                if rest[0] == "tree":  # olah's tree route needs the slash after the commit, even for the root
                    req["rewrite"] = lambda c: f"/api/{kind}/{repo_id}/tree/{c}/{tail}"
                else:
                    req["rewrite"] = lambda c: f"/api/{kind}/{repo_id}/{rest[0]}/{c}"
            return req
        if "resolve" in dec[1:]:
            i = dec.index("resolve", 1)
            kind, id_segs = ("models", dec[:i]) if dec[0] not in REPO_TYPES else (dec[0], dec[1:i])
            if 1 <= len(id_segs) <= 2 and len(dec) > i + 2:
                repo_id = "/".join(id_segs)
                prefix = "/".join(segs[:i])
                tail = "/".join(segs[i + 2:])
                return dict(kind=kind, repo=repo_id, route="resolve", verb="resolve", revision=dec[i + 1],
                            path="/".join(dec[i + 2:]), rewrite=lambda c: f"/{prefix}/resolve/{c}/{tail}")
        return dict(kind=None, repo=None, route="other", verb=None, revision=None, path=None)

    # --- ASGI ------------------------------------------------------------------------------------------------------

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.olah(scope, receive, send)
        raw = (scope.get("raw_path") or quote(scope["path"]).encode()).decode("latin-1").split("?")[0]
        req = self.parse(raw)
        entry = dict(t=round(time.time(), 3), method=scope["method"], path=raw,
                     query=scope.get("query_string", b"").decode("latin-1"),
                     repo_type=REPO_TYPES.get(req["kind"]), repo_id=req["repo"], revision=req["revision"],
                     file=req["path"], commit=None, status=None)
        status_box = {}

        async def send_logged(message):
            if message["type"] == "http.response.start":
                status_box["status"] = message["status"]
                status_box["error"] = dict(message.get("headers") or []).get(b"x-error-code", b"").decode() or None
            await send(message)

        try:
            answer = self.answer(scope, req, entry)
            if answer is not None:
                await self._respond(send_logged, scope, *answer)
            elif req["route"] == "other" and raw in self.files:
                await self._file(send_logged, scope, self.files[raw])
            else:
                if entry["commit"] and "rewrite" in req:
                    path = req["rewrite"](entry["commit"])
                    scope = dict(scope, path=unquote(path), raw_path=path.encode("latin-1"))
                await self.olah(scope, receive, send_logged)
        finally:
            entry["status"], entry["error"] = status_box.get("status"), status_box.get("error")
            with self.log_lock:
                self.log.write(json.dumps(entry) + "\n")

    def answer(self, scope, req: dict, entry: dict):
        """A response the layer gives itself (errors), or None to hand the request to olah."""
        if req["kind"] is None:
            return None
        kind, repo_id = req["kind"], req["repo"]
        if not self.repos.exists(kind, repo_id):
            return _error(401, "RepoNotFound", "Repository not found")
        if req["route"] == "resolve" and kind == "models" and repo_id in self.repos.gated:
            token = dict(scope["headers"]).get(b"authorization", b"").decode().removeprefix("Bearer ").strip()
            if not token:
                return _error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access to "
                                                f"it and be authenticated to access it. Please log in.")
            if token not in self.accepted:
                return _error(403, "GatedRepo", f"Access to model {repo_id} is restricted and you are not in the "
                                                f"authorized list. Visit https://huggingface.co/{repo_id} to ask "
                                                f"for access.")
        if req["revision"] is None:
            return None
        commit = self.repos.resolve(kind, repo_id, req["revision"])
        if commit is None:
            return _error(404, "RevisionNotFound", f"Invalid rev id: {req['revision']}")
        entry["commit"] = commit
        if req["path"] is not None:
            found = self.repos.kind_of(kind, repo_id, commit, req["path"])
            if found is None or (req["route"] == "resolve" and found != "blob"):
                return _error(404, "EntryNotFound", f"{req['path']} does not exist on \"{req['revision']}\"")
        return None

    @staticmethod
    async def _respond(send, scope, status: int, headers: dict, body: bytes):
        head = scope["method"] == "HEAD"
        headers = {**headers, "content-length": str(len(body))}
        await send({"type": "http.response.start", "status": status,
                    "headers": [(k.encode(), v.encode()) for k, v in headers.items()]})
        await send({"type": "http.response.body", "body": b"" if head else body})

    async def _file(self, send, scope, path: Path):
        if scope["method"] not in ("GET", "HEAD"):
            return await self._respond(send, scope, *_error(405, "MethodNotAllowed", "GET or HEAD only"))
        data = path.read_bytes()
        await self._respond(send, scope, 200, {"content-type": "application/zip"}, data)


def _watch_parent(parent: int) -> None:
    """Exit when the process that started the server is gone (no orphaned servers after a killed test run)."""
    while True:
        time.sleep(1)
        if os.getppid() != parent:
            os._exit(0)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", type=Path, required=True, help="populated root (build.populate)")
    p.add_argument("--state", type=Path, required=True, help="folder for the port file, log and olah's cache")
    p.add_argument("--port", type=int, default=0, help="0 = a free port")
    args = p.parse_args(argv)
    args.state.mkdir(parents=True, exist_ok=True)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))  # loopback only
    port = sock.getsockname()[1]

    config = args.state / "olah.toml"
    config.write_text(
        "[basic]\n"
        f'host = "127.0.0.1"\nport = {port}\n'
        f'repos-path = "{args.state / "olah-repos"}"\n'
        f'mirrors-path = ["{args.root.resolve()}"]\n'
        'hf-scheme = "http"\nhf-netloc = "127.0.0.1:9"\nhf-lfs-netloc = "127.0.0.1:9"\n'  # never used offline
        "\n[accessibility]\noffline = true\n")
    from olah.configs import OlahConfig
    from olah.server import AppSettings, app
    from olah.utils.logging import build_logger

    app.state.app_settings = AppSettings(config=OlahConfig(str(config)))
    app.state.logger = build_logger("olah", "olah.log", logger_dir=str(args.state / "olah-logs"))
    accepted = set(json.loads(os.environ.get("HUBSTANDIN_ACCEPTED_TOKENS") or "[]"))
    standin = StandInApp(app, args.root.resolve(), args.state / "requests.jsonl", accepted)

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(standin, log_level="warning", access_log=False, lifespan="on"))
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()

    async def serve():
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        (args.state / "port.tmp").write_text(str(port))
        (args.state / "port.tmp").rename(args.state / "port")
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())
