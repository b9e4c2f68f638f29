"""TLS for SSL listeners, from Kafka's PEM keystore and truststore configs
(`ssl.keystore.type=PEM`): the key and chain from `ssl.keystore.location` (one PEM file) or
inline in `ssl.keystore.certificate.chain` + `ssl.keystore.key`, an encrypted key's
`ssl.key.password`, client certificates checked against `ssl.truststore.location` /
`ssl.truststore.certificates` as `ssl.client.auth` asks, versions from
`ssl.enabled.protocols`.

Errors are ConfigErrors naming the key and the broker file; secret values (keys, passwords)
are never shown in them.
"""

from __future__ import annotations

import os
import ssl
import tempfile

from engine.config import ConfigError

__all__ = ["server_context"]

_HIDDEN = "[hidden]"
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def _load_chain(ctx: ssl.SSLContext, config, file) -> None:
    location = config["ssl.keystore.location"]
    chain, key = config["ssl.keystore.certificate.chain"], config["ssl.keystore.key"]
    password = config["ssl.key.password"]
    if location is None and (chain is None or key is None):
        raise ConfigError("ssl.keystore.location", None, "an SSL listener needs a PEM keystore: "
                          "ssl.keystore.location, or ssl.keystore.certificate.chain and "
                          "ssl.keystore.key", file=file)
    if location is not None:
        try:
            ctx.load_cert_chain(location, password=password)
        except FileNotFoundError as exc:
            raise ConfigError("ssl.keystore.location", location,
                              f"[Errno {exc.errno}] {exc.strerror}", file=file) from None
        except ssl.SSLError as exc:
            raise ConfigError("ssl.keystore.location", location, f"not a PEM key and "
                              f"certificate chain (or a wrong ssl.key.password): {exc.reason}",
                              file=file) from None
        return
    # the ssl module loads chains from files only: a private temporary file, removed at once
    with tempfile.TemporaryDirectory(prefix="serve-tls-") as tmp:
        path = os.path.join(tmp, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key.strip() + "\n" + chain.strip() + "\n")
        try:
            ctx.load_cert_chain(path, password=password)
        except ssl.SSLError as exc:
            raise ConfigError("ssl.keystore.key", _HIDDEN, "not a PEM key matching "
                              f"ssl.keystore.certificate.chain: {exc.reason}",
                              file=file) from None


def _load_trust(ctx: ssl.SSLContext, config, file) -> None:
    location, inline = config["ssl.truststore.location"], config["ssl.truststore.certificates"]
    if location is None and inline is None:
        raise ConfigError("ssl.client.auth", config["ssl.client.auth"],
                          "client authentication needs ssl.truststore.location or "
                          "ssl.truststore.certificates", file=file)
    key = "ssl.truststore.location" if location is not None else "ssl.truststore.certificates"
    try:
        if location is not None:
            ctx.load_verify_locations(cafile=location)
        else:
            ctx.load_verify_locations(cadata=inline)
    except FileNotFoundError as exc:
        raise ConfigError(key, location, f"[Errno {exc.errno}] {exc.strerror}",
                          file=file) from None
    except ssl.SSLError as exc:
        raise ConfigError(key, location or _HIDDEN, f"not PEM certificates: {exc.reason}",
                          file=file) from None


def server_context(config, file=None) -> ssl.SSLContext:
    """The SSLContext of the broker's SSL listeners."""
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        if config[key].upper() != "PEM":
            raise ConfigError(key, config[key], "serve reads PEM stores only (set PEM)",
                              file=file)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted(_VERSIONS[v] for v in config["ssl.enabled.protocols"])
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    _load_chain(ctx, config, file)
    auth = config["ssl.client.auth"]
    if auth != "none":
        _load_trust(ctx, config, file)
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
    return ctx
