"""Helpers for the real-browser tests: find Chromium, start JupyterLab with a token, stop it cleanly.

JupyterLab runs with every per-user folder (config, runtime, settings, workspaces) inside the test's
own folder, so the user's setup is neither read nor changed, and with settings that keep the first-run
news pop-up and the update check away and render every notebook cell (no virtual scrolling).
"""
from __future__ import annotations

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

import pytest

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")

# Settings JupyterLab reads from its user settings folder: `<plugin>.jupyterlab-settings` under
# `<package>/` there. fetchNews "false" (a string: "none" means "not asked yet" and asks) silences the news.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


def find_chromium() -> str | None:
    """The Chromium binary to drive: Debian's /usr/bin/chromium, else one on PATH; None when there is none."""
    for candidate in CHROMIUM_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("chromium") or shutil.which("chromium-browser")


def require_browser() -> str:
    """Chromium's path and an importable playwright, or skip with the reason; on CI (``CI=true``) fail instead,
    since CI must have both (``.ci/run`` installs Chromium)."""
    problem = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as error:
        problem = f"the playwright package is not importable ({error}); pip install -e '.[dev]'"
    chromium = find_chromium()
    if problem is None and chromium is None:
        problem = "no Chromium binary (/usr/bin/chromium or chromium on PATH); apt-get install chromium"
    if problem is None:
        return chromium
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must run the browser test, but {problem}", pytrace=False)
    pytest.skip(problem)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LabServer:
    """A JupyterLab server on 127.0.0.1 serving ``root_dir``, guarded by a random token.

    ``home`` receives the per-user folders and the log (``lab.log``). Use as a context manager, or call
    :meth:`start` and :meth:`stop`; :meth:`stop` shuts the kernels down before the server.
    """

    def __init__(self, root_dir: Path, home: Path, startup_timeout: float = 120.0) -> None:
        self.root_dir, self.home, self.startup_timeout = Path(root_dir), Path(home), startup_timeout
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.home / "lab.log"
        self.process: subprocess.Popen | None = None

    def _environment(self) -> dict[str, str]:
        folders = {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data", "JUPYTER_RUNTIME_DIR": "runtime",
                   "JUPYTERLAB_SETTINGS_DIR": "settings", "JUPYTERLAB_WORKSPACES_DIR": "workspaces"}
        env = dict(os.environ, **{name: str(self.home / sub) for name, sub in folders.items()})
        for path in folders.values():
            (self.home / path).mkdir(parents=True, exist_ok=True)
        for plugin, values in LAB_SETTINGS.items():
            package, name = plugin.rsplit("/", 1)
            target = self.home / "settings" / package / f"{name}.jupyterlab-settings"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(values))
        return env

    def start(self) -> LabServer:
        command = [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
            "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}", "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ] + (["--allow-root"] if os.geteuid() == 0 else [])  # CI containers run as root
        env = self._environment()
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(command, env=env, cwd=self.root_dir,
                                        stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def api(self, path: str, method: str = "GET") -> object:
        """Call the server's REST API with the token; the decoded JSON answer (None when empty)."""
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.process.returncode}:\n{self.log()}")
            try:
                self.api("/api/status")
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        raise RuntimeError(f"JupyterLab did not answer within {self.startup_timeout:.0f} s:\n{self.log()}")

    def lab_url(self, relative: str) -> str:
        """The browser address of a file under ``root_dir`` in the lab UI, token included."""
        return f"{self.url}/lab/tree/{relative}?token={self.token}"

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.is_file() else ""

    def stop(self) -> None:
        """Shut every kernel down, then the server: asked through the API, terminated, killed as a last resort."""
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                for kernel in self.api("/api/kernels") or []:
                    self.api(f"/api/kernels/{kernel['id']}", method="DELETE")
                self.api("/api/shutdown", method="POST")
            except (urllib.error.URLError, ConnectionError, TimeoutError):
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

    def __enter__(self) -> LabServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
