"""``cfkit app``: the Voilà launcher of the explorer, and the environment variables through which it hands the
classifier (and its state, and the per-pair folder) to the page's kernel."""
from __future__ import annotations

import os
from pathlib import Path

from ...errors import CfkitError, InputError
from ...zoo.classifiers import load_classifier

CLASSIFIER_VARIABLE = "CFKIT_APP_CLASSIFIER"
"""The classifier the app explains (a zoo name, a TorchScript file or ``package.module:factory``); unset: the zoo's."""
STATE_VARIABLE = "CFKIT_APP_CLASSIFIER_STATE"
"""The state dict of a ``package.module:factory`` classifier."""
PAIR_DIR_VARIABLE = "CFKIT_APP_PAIR_DIR"
"""A folder of per-pair models (``cfkit train c3lt --pair Q T --out DIR``) used instead of the shipped ones."""
NOTEBOOK = Path(__file__).resolve().parents[3] / "app" / "explorer.ipynb"
"""The Voilà page: two lines that build :class:`ExplorerApp` from the environment."""


def serve(port: int | None = None, classifier: str | None = None, classifier_state: str | None = None,
          pair_dir: str | None = None, notebook: str | Path = NOTEBOOK) -> None:
    """``cfkit app``: check the classifier, then serve the explorer with Voilà on 127.0.0.1 in the foreground
    (the address, token included, is printed) until Ctrl-C. The classifier reaches the page's kernel through
    :data:`CLASSIFIER_VARIABLE` and its companions."""
    import shutil
    import signal
    import tempfile

    from ..servers import VoilaServer

    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
        raise InputError(f"--port must be a TCP port, 1-65535, got {port!r}; leave it out for a free one.")
    if classifier_state is not None and classifier is None:
        raise InputError("--classifier-state goes with --classifier package.module:factory.")
    if classifier is not None:
        load_classifier(classifier, classifier_state)  # a clear error now rather than on the page
    if pair_dir is not None and not Path(pair_dir).is_dir():
        raise InputError(f"--pair-dir {pair_dir} is not a folder; train per-pair models into one with "
                         "`cfkit train c3lt --pair Q T --out <folder>`.")
    for variable, value in ((CLASSIFIER_VARIABLE, classifier), (STATE_VARIABLE, classifier_state),
                            (PAIR_DIR_VARIABLE, pair_dir)):
        if value is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = str(Path(value).resolve()) if Path(value).exists() else value
    home = Path(tempfile.mkdtemp(prefix="cfkit-app-"))
    server = VoilaServer(Path(notebook), home, port=port)
    print(f"starting Voilà on 127.0.0.1 (log: {server.log_path}) …", flush=True)

    def stop_on(signum, frame):  # a kill or a closed terminal stops Voilà too (the finally below), not only Ctrl-C
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop_on)
    try:
        server.start()
    except RuntimeError as error:  # Voilà exited or never answered (a taken port, say): its log says why
        raise CfkitError(f"Voilà did not start: {error}") from error
    try:
        print(f"the explorer is at {server.page_url()}\n(each visit runs the page in a fresh kernel: the first view "
              "takes a few seconds to load the models; Ctrl-C stops the server)", flush=True)
        server.process.wait()
    except KeyboardInterrupt:
        print("stopping …", flush=True)
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
