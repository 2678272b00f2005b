"""The local API process: the same Lambda handler as in AWS, behind a loopback WSGI server that turns HTTP
requests into API Gateway HTTP API v2 events (bearer tokens stand in for IAM identities)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from tickwork.composition import Components
from tickwork.handlers import api, runtime
from tickwork.local.http_api import HttpApiApp, make_api_server, serve_until
from tickwork.local.runtime import HEALTH_FILE


def serve(parts: Components, stop: threading.Event) -> None:
    runtime.install(parts)
    tokens = json.loads(os.environ.get("TICKWORK_LOCAL_TOKENS", "{}"))
    port = int(os.environ.get("TICKWORK_API_PORT", "8080"))
    run_dir = Path(os.environ.get("TICKWORK_LOCAL_RUN_DIR", ".tickwork/run"))
    app = HttpApiApp(api.handler, tokens, parts.clock, health_file=run_dir / HEALTH_FILE)
    server = make_api_server(app, port=port)
    serve_until(server, stop)
