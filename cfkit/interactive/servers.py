"""Local Jupyter servers for a browser: JupyterLab on a notebook folder, Voilà on one notebook.

Both listen on 127.0.0.1 only, behind a random token, with every per-user Jupyter folder (config,
runtime, settings, workspaces) inside a folder of their own, so a user's setup is neither read nor
changed; both start as root too (as in a container). The benchmark, the app's launcher and the
browser tests share them.
"""
from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")

# Settings JupyterLab reads from its user settings folder: `<plugin>.jupyterlab-settings` under
# `<package>/` there. fetchNews "false" (a string: "none" means "not asked yet" and asks) silences the news.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}
JUPYTER_FOLDERS = {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data", "JUPYTER_RUNTIME_DIR": "runtime",
                   "JUPYTERLAB_SETTINGS_DIR": "settings", "JUPYTERLAB_WORKSPACES_DIR": "workspaces"}


def find_chromium() -> str | None:
    """The Chromium binary to drive: Debian's /usr/bin/chromium, else one on PATH; None when there is none."""
    for candidate in CHROMIUM_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def root_flags() -> list[str]:
    """``--allow-root`` when running as root: Jupyter's server refuses root without it (containers, CI)."""
    return ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []


class JupyterServer:
    """A Jupyter server process on 127.0.0.1 guarded by a random token; subclasses give its command line.

    ``home`` receives the per-user folders and the log (``<name>.log``). Use as a context manager, or call
    :meth:`start` and :meth:`stop`.
    """

    name = "server"

    def __init__(self, root_dir: Path, home: Path, startup_timeout: float = 120.0, port: int | None = None) -> None:
        self.root_dir, self.home, self.startup_timeout = Path(root_dir), Path(home), startup_timeout
        self.token = secrets.token_hex(16)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.home / f"{self.name}.log"
        self.process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The process environment: every per-user Jupyter folder inside ``home``."""
        env = dict(os.environ, **{var: str(self.home / sub) for var, sub in JUPYTER_FOLDERS.items()})
        for sub in JUPYTER_FOLDERS.values():
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        return env

    def start(self) -> JupyterServer:
        self.home.mkdir(parents=True, exist_ok=True)
        env = self.environment()
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(self.command(), env=env, cwd=self.root_dir,
                                        stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def answers(self) -> bool:
        """Whether the server answers HTTP at all (a redirect to its login page counts)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            connection.request("GET", "/api/status")
            connection.getresponse().read()
            return True
        except (ConnectionError, OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log()}")
            if self.answers():
                return
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} did not answer within {self.startup_timeout:.0f} s:\n{self.log()}")

    def api(self, path: str, method: str = "GET") -> object:
        """Call the server's REST API with the token; the decoded JSON answer (None when empty)."""
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.is_file() else ""

    def shutdown_request(self) -> None:
        """Ask the server to stop (kernels first where it has an API for it); terminate follows if it does not."""

    def stop(self) -> None:
        """Ask the server to stop, then terminate it, and kill it as a last resort."""
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                self.shutdown_request()
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if not self._exits_within(15):
                self.process.terminate()
                if not self._exits_within(15):
                    self.process.kill()
                    self.process.wait()
        self._log.close()
        self.process = None

    def _exits_within(self, seconds: float) -> bool:
        try:
            self.process.wait(timeout=seconds)
            return True
        except subprocess.TimeoutExpired:
            return False

    def __enter__(self) -> JupyterServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LabServer(JupyterServer):
    """JupyterLab serving ``root_dir``, with settings that keep the first-run news pop-up and the update check
    away and render every notebook cell (no virtual scrolling)."""

    name = "lab"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
            "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}", "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", *root_flags(),
        ]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        for plugin, values in LAB_SETTINGS.items():
            package, name = plugin.rsplit("/", 1)
            target = self.home / "settings" / package / f"{name}.jupyterlab-settings"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(values))
        return env

    def lab_url(self, relative: str) -> str:
        """The browser address of a file under ``root_dir`` in the lab UI, token included."""
        return f"{self.url}/lab/tree/{relative}?token={self.token}"

    def shutdown_request(self) -> None:
        for kernel in self.api("/api/kernels") or []:
            self.api(f"/api/kernels/{kernel['id']}", method="DELETE")
        self.api("/api/shutdown", method="POST")


class VoilaServer(JupyterServer):
    """Voilà serving one notebook as a page without code: each visit runs it in a fresh kernel."""

    name = "voila"

    def __init__(self, notebook: Path, home: Path, startup_timeout: float = 120.0, port: int | None = None) -> None:
        self.notebook = Path(notebook).resolve()
        super().__init__(self.notebook.parent, home, startup_timeout, port)

    def environment(self) -> dict[str, str]:
        """As a Jupyter server's, and a ``jupyter`` folder beside the notebook (its Voilà templates: the app's works
        offline) first on JUPYTER_PATH; Voilà reads ``voila.json`` there too, as it starts in that folder."""
        env = super().environment()
        carried = self.notebook.parent / "jupyter"
        if carried.is_dir():
            env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(carried), env.get("JUPYTER_PATH")]))
        return env

    def command(self) -> list[str]:
        return [sys.executable, "-m", "voila", str(self.notebook), "--no-browser", "--Voila.ip=127.0.0.1",
                f"--port={self.port}", "--Voila.port_retries=0", f"--token={self.token}"]

    def page_url(self) -> str:
        """The app's address, token included."""
        return f"{self.url}/?token={self.token}"
