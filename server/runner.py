"""Running the proxy: in the foreground (``skilldesk serve``) or on a thread (tests, benches).

:class:`ServerThread` binds first (port 0 picks a free loopback port) and exposes ``url`` once
uvicorn is accepting connections.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

import uvicorn

from server.config import ServerConfig


def _uvicorn_config(app: Any, config: ServerConfig, *, log_level: str = "info",
                    access_log: bool = True) -> uvicorn.Config:
    return uvicorn.Config(app, host=config.host, port=config.port, log_level=log_level,
                          access_log=access_log, timeout_keep_alive=30, lifespan="off",
                          server_header=False, backlog=512)


def serve(app: Any, config: ServerConfig, *, log_level: str = "info") -> None:
    """Serve until Ctrl-C (uvicorn handles SIGINT/SIGTERM and drains open requests)."""
    uvicorn.Server(_uvicorn_config(app, config, log_level=log_level)).run()


class ServerThread:
    """uvicorn on a daemon thread; ``with ServerThread(app, cfg) as srv: srv.url``."""

    def __init__(self, app: Any, config: ServerConfig, *, log_level: str = "warning"):
        self.config = config
        self._sock = socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((config.host, config.port))
        self.port = self._sock.getsockname()[1]
        self.server = uvicorn.Server(_uvicorn_config(app, config, log_level=log_level,
                                                     access_log=False))
        self._thread = threading.Thread(target=self._run, name="skilldesk-serve", daemon=True)
        self.error: BaseException | None = None

    @property
    def url(self) -> str:
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        return f"http://{host}:{self.port}"

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self._sock])
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self.error = exc

    def start(self, timeout: float = 30.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if self.error is not None or not self._thread.is_alive():
                raise RuntimeError(f"the proxy did not start: {self.error}")
            if time.monotonic() > deadline:
                raise TimeoutError("the proxy did not start in time")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.server.force_exit = True
            self._thread.join(5)
        try:
            self._sock.close()
        except OSError:
            pass

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def quiet_access_log() -> None:
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
