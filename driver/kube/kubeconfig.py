"""Access to the apiserver through a kubeconfig file, loaded by the official ``kubernetes`` client.

Why the official client here, and only here: a kubeconfig can hold exec credential plugins,
client certificates, token files and refresh hooks, and the official loader runs all of them as
``kubectl`` would. That is all it does for the driver: the requests go over the driver's own
transport (:mod:`driver.kube.transport`), configured from the loaded ``Configuration`` by
:func:`settings_from_configuration` and authorized per request through the Configuration's own
``auth_settings()``, which runs its refresh hook (exec plugins, expiring tokens) exactly as the
official client does before each of its requests. A pod never gets here (no kubeconfig:
:mod:`driver.kube.incluster`), so it never imports ``kubernetes``.

A setting the transport cannot honour is a :class:`~driver.errors.ConfigError` naming it, never
dropped silently.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlsplit

from driver.errors import ConfigError
from driver.kube.proxy import bypasses_proxy, parse_proxy_url
from driver.kube.transport import TransportSettings

__all__ = ["Kubeconfig", "configuration_key", "settings_from_configuration"]


class Kubeconfig:
    """A kubeconfig's settings and ``Authorization`` of right now (thread-safe).

    Loading runs the official loader (and an exec plugin, if the file names one); a failure is a
    :class:`ConfigError` naming the file.
    """

    def __init__(self, path: str) -> None:
        try:
            from kubernetes import client, config

            cfg = client.Configuration()
            config.load_kube_config(config_file=path, client_configuration=cfg)  # type: ignore[no-untyped-call]
        except Exception as exc:
            raise ConfigError(f"cannot load the kubeconfig {path}: {type(exc).__name__}: {exc}") from exc
        # The refresh hook re-assigns ``host`` before every request, and while the proxy comes from
        # the environment the host setter re-reads the whole environment. Pin the proxy it
        # resolved now (the value does not change).
        cfg.proxy = cfg.proxy
        self.path = path
        self._cfg: Any = cfg
        self._lock = threading.Lock()
        self._key: tuple[Any, ...] = ()
        self._settings: TransportSettings | None = None
        self.settings  # noqa: B018 -- check the settings now, so a bad file fails the start

    @property
    def settings(self) -> TransportSettings:
        """Where to connect and how, as the Configuration says now (a refresh hook may swap the
        client certificate; the settings are rebuilt only when a field they come from changed)."""
        key = configuration_key(self._cfg)
        settings = self._settings
        if settings is not None and key == self._key:
            return settings
        with self._lock:
            if self._settings is None or key != self._key:
                self._settings = settings_from_configuration(self._cfg, source=f"kubeconfig {self.path}")
                self._key = key
            return self._settings

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header of right now (none for client-certificate users)."""
        setting = self._cfg.auth_settings().get("BearerToken")
        if not setting or not setting.get("value"):
            return {}
        if setting.get("in") != "header":
            raise ConfigError(f"kubeconfig {self.path}: auth setting location {setting.get('in')!r}")
        return {"Authorization": str(setting["value"])}


def settings_from_configuration(cfg: Any, *, source: str = "kubeconfig") -> TransportSettings:
    """The transport settings of an official ``Configuration``; ConfigError for what they cannot hold.

    Mirrors what the official client does with the same fields, so the driver talks to the same
    server the same way; ``source`` names the configuration in errors.
    """
    url = urlsplit(str(cfg.host))
    if url.scheme not in ("http", "https"):
        raise ConfigError(f"{source}: server scheme {url.scheme!r} is not supported (http or https)")
    if not url.hostname or url.username or url.password or url.query or url.fragment:
        raise ConfigError(f"{source}: server URL {cfg.host!r} is not a plain http(s) URL")
    port = url.port or (443 if url.scheme == "https" else 80)
    assert_hostname = cfg.assert_hostname
    if assert_hostname not in (None, True, False):
        raise ConfigError(f"{source}: assert_hostname naming another host is not supported")
    if getattr(cfg, "client_go_retries", False):
        raise ConfigError(f"{source}: client-go style retries are not supported (the driver retries itself)")
    proxy = None
    if cfg.proxy and not bypasses_proxy(url.hostname, port, cfg.no_proxy or ""):
        proxy = parse_proxy_url(str(cfg.proxy), f"{source}: proxy-url")
        if cfg.proxy_headers:
            raise ConfigError(f"{source}: proxy headers are not supported (credentials go in the proxy URL)")
    options: list[tuple[int, int, int | bytes]] = []
    if cfg.socket_options is not None:
        options = list(cfg.socket_options)
    elif getattr(cfg, "keep_alive", False):
        from kubernetes.utils.keepalive import tcp_keepalive_socket_options

        options = list(tcp_keepalive_socket_options())
    return TransportSettings(
        scheme=url.scheme,
        host=url.hostname,
        port=port,
        base_path=url.path.rstrip("/"),
        verify=bool(cfg.verify_ssl),
        check_hostname=assert_hostname is not False,
        server_hostname=cfg.tls_server_name or "",
        ca_file=cfg.ssl_ca_cert or "",
        ca_data=cfg.ca_cert_data or "",
        cert_file=cfg.cert_file or "",
        key_file=cfg.key_file or "",
        socket_options=tuple(options),
        proxy=proxy,
    )


def configuration_key(cfg: Any) -> tuple[Any, ...]:
    """Every ``Configuration`` field :func:`settings_from_configuration` reads, to notice a change.

    A refresh hook may swap them (an exec plugin returning a new client certificate); comparing
    this key per request is cheap next to the request.
    """
    return (
        cfg.host,
        cfg.proxy,
        cfg.no_proxy,
        cfg.proxy_headers is not None,
        cfg.assert_hostname,
        cfg.verify_ssl,
        cfg.tls_server_name,
        cfg.ssl_ca_cert,
        cfg.ca_cert_data,
        cfg.cert_file,
        cfg.key_file,
        cfg.socket_options,
        getattr(cfg, "keep_alive", False),
        getattr(cfg, "client_go_retries", False),
    )
