"""Per-chunk transforms of the object-store tier, as the Aiven plugin does them.

Upload, per chunk of `chunk.size` original bytes:

    plain  ->  zstd (optional)  ->  AES-256-GCM (optional)

- zstd: one independent frame per chunk, level 3, the content size in the frame header,
  no checksum (zstd-jni's defaults, as the plugin compresses). With
  `compression.heuristic.enabled`, a segment whose first batch is already compressed (or
  whose first batch cannot be read: the plugin's fallback) is not compressed.
- AES-256-GCM: `IV (12 random bytes) || ciphertext || tag (16 bytes)`, with the segment's
  data key (DEK, 32 random bytes) and AAD (32 random bytes, the same for every chunk of the
  segment), a fresh IV for every chunk and every index.
- Envelope: the DEK is wrapped with the RSA public key of the active key pair
  (`encryption.key.pair.id`) by RSA-OAEP with SHA3-512 as both the OAEP hash and the MGF1
  hash and an empty label (BouncyCastle's `RSA/NONE/OAEPWithSHA3-512AndMGF1Padding`, which
  the plugin uses), and stored in the manifest as `<keyPairId>:<base64>`. Reading unwraps it
  with that pair's private key from the key ring (`encryption.key.pairs`).

Keys are PEM files: public keys X.509 SubjectPublicKeyInfo, private keys PKCS#8 (traditional
RSA PEM is read too). They are loaded and checked (RSA, the private key matching the public
one) when the RSM is configured, so a wrong or missing key fails there, naming its config
key, and nothing is ever written with it.

Libraries: `cryptography` (OpenSSL) loads the PEM files and runs AES-GCM on chunks (the hot
path). RSA-OAEP with SHA3-512 is not offered by `cryptography`, so the wrap and unwrap of the
32-byte DEK (once per segment) use `pycryptodome`'s PKCS1_OAEP with the same key numbers.

Decoding a damaged chunk (a bad GCM tag, a bad zstd frame, a size other than the manifest's)
raises CorruptRemoteObjectError naming the object and chunk id; no bytes are returned.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from engine.errors import ConfigError, CorruptRemoteObjectError, RemoteEncryptionKeyError
from engine.records import scan_batches
from engine.remote.objectstore.manifest import GCM_OVERHEAD, IV_SIZE, EncryptionMetadata

__all__ = [
    "AAD_SIZE",
    "DATA_KEY_SIZE",
    "ChunkTransform",
    "DataKey",
    "KeyPair",
    "KeyRing",
    "compress_chunk",
    "first_batch_compressed",
]

DATA_KEY_SIZE = 32
AAD_SIZE = 32
_ZSTD_LEVEL = 3
# A v2 batch header up to the length field; a batch claiming more than this is not read by
# the heuristic (the broker's own limit on a batch is far below a segment).
_LENGTH_END = 12
_MAX_FIRST_BATCH = 64 << 20


# ---- keys --------------------------------------------------------------------------------

class KeyPair:
    """One RSA key pair of the key ring. Holds key material: never printed."""

    __slots__ = ("_private", "_public", "key_id")

    def __init__(self, key_id: str, public_key: rsa.RSAPublicKey,
                 private_key: rsa.RSAPrivateKey):
        self.key_id = key_id
        self._public = public_key
        self._private = private_key

    def wrap(self, data_key: bytes) -> bytes:
        return _oaep(self._public.public_numbers(), None).encrypt(data_key)

    def unwrap(self, wrapped: bytes) -> bytes:
        return _oaep(self._public.public_numbers(), self._private.private_numbers()).decrypt(
            wrapped)

    def __repr__(self):
        return f"KeyPair({self.key_id!r})"


def _oaep(public: rsa.RSAPublicNumbers, private: rsa.RSAPrivateNumbers | None):
    from Crypto.Cipher import PKCS1_OAEP
    from Crypto.Hash import SHA3_512
    from Crypto.PublicKey import RSA
    from Crypto.Signature.pss import MGF1

    if private is None:
        key = RSA.construct((public.n, public.e))
    else:
        key = RSA.construct((public.n, public.e, private.d, private.p, private.q))
    return PKCS1_OAEP.new(key, hashAlgo=SHA3_512,
                          mgfunc=lambda seed, length: MGF1(seed, length, SHA3_512))


class KeyRing:
    """The configured key pairs by id, and the active one that wraps new data keys."""

    __slots__ = ("_pairs", "active_id")

    def __init__(self, active_id: str, pairs: Mapping[str, KeyPair]):
        if active_id not in pairs:
            raise ValueError(f"active key pair {active_id!r} is not in the key ring")
        self.active_id = active_id
        self._pairs = dict(pairs)

    @classmethod
    def load(cls, active_id: str, files: Mapping[str, tuple[str, str]], config_key) -> KeyRing:
        """Loads each pair's PEM files (`files`: id -> (public file, private file)).
        `config_key(id, "public" | "private")` names the config key of a file; a missing,
        unreadable or non-RSA file, or a private key that is not the public key's, raises
        ConfigError naming that key; a ValueError for a key id without files."""
        pairs = {}
        for key_id, (public_file, private_file) in files.items():
            public = _load_pem(public_file, config_key(key_id, "public"), private=False)
            private = _load_pem(private_file, config_key(key_id, "private"), private=True)
            if private.public_key().public_numbers() != public.public_numbers():
                raise ConfigError(config_key(key_id, "private"), private_file,
                                   f"is not the private key of key pair {key_id!r}'s "
                                   "public key")
            pairs[key_id] = KeyPair(key_id, public, private)
        return cls(active_id, pairs)

    @property
    def ids(self) -> list[str]:
        return list(self._pairs)

    def new_data_key(self) -> DataKey:
        """A fresh DEK and AAD for one segment, the DEK wrapped with the active pair."""
        key, aad = os.urandom(DATA_KEY_SIZE), os.urandom(AAD_SIZE)
        wrapped = self._pairs[self.active_id].wrap(key)
        return DataKey(key, aad, EncryptionMetadata(self.active_id, wrapped, aad))

    def unwrap(self, encryption: EncryptionMetadata, object_key: str) -> DataKey:
        """The segment's DEK. RemoteEncryptionKeyError naming the key pair id when it is not
        in the ring or its private key does not unwrap the DEK."""
        pair = self._pairs.get(encryption.key_id)
        if pair is None:
            raise RemoteEncryptionKeyError(
                f"segment manifest {object_key}: data key wrapped with key pair "
                f"{encryption.key_id!r}, which is not in encryption.key.pairs "
                f"({', '.join(map(repr, self._pairs))})",
                key_id=encryption.key_id, object_key=object_key, unknown_key=True)
        try:
            key = pair.unwrap(encryption.wrapped_data_key)
        except ValueError:
            key = None
        if key is None or len(key) != DATA_KEY_SIZE:
            raise RemoteEncryptionKeyError(
                f"segment manifest {object_key}: the private key of key pair "
                f"{encryption.key_id!r} does not unwrap the segment's data key (a different "
                "key under the same id, or a damaged dataKey)",
                key_id=encryption.key_id, object_key=object_key)
        return DataKey(key, encryption.aad, encryption)

    def __repr__(self):
        return f"KeyRing(active={self.active_id!r}, pairs={list(self._pairs)!r})"


@overload
def _load_pem(path: str, config_key: str, *, private: Literal[True]) -> rsa.RSAPrivateKey: ...


@overload
def _load_pem(path: str, config_key: str, *, private: Literal[False]) -> rsa.RSAPublicKey: ...


def _load_pem(path: str, config_key: str, *, private: bool
              ) -> rsa.RSAPrivateKey | rsa.RSAPublicKey:
    key: object
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(config_key, path, f"cannot be read: [Errno {exc.errno}] "
                                             f"{exc.strerror}") from None
    try:
        if private:
            key = serialization.load_pem_private_key(data, password=None)
        else:
            key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        kind = "an unencrypted PKCS#8 private" if private else "an X.509 public"
        raise ConfigError(config_key, path, f"is not {kind} key in PEM "
                                             f"({type(exc).__name__})") from None
    expected = rsa.RSAPrivateKey if private else rsa.RSAPublicKey
    if not isinstance(key, expected):
        raise ConfigError(config_key, path, f"holds a {type(key).__name__}, not an RSA key")
    return key


@dataclass(frozen=True, slots=True, repr=False)
class DataKey:
    """A segment's AES-256 data key and AAD, with the manifest's record of them."""

    key: bytes
    aad: bytes
    metadata: EncryptionMetadata

    def __repr__(self):
        return f"DataKey(key_id={self.metadata.key_id!r})"


# ---- chunk transforms --------------------------------------------------------------------

def compress_chunk(data) -> bytes:
    """One zstd frame of `data`, stating its content size (the plugin's chunk frames)."""
    return zstandard.ZstdCompressor(level=_ZSTD_LEVEL, write_content_size=True,
                                    write_checksum=False).compress(data)


class ChunkTransform:
    """The transforms of one segment: `compression` and the data key (None: no
    encryption). Thread-safe: every call builds what it needs."""

    __slots__ = ("_aead", "compression", "data_key")

    def __init__(self, compression: bool, data_key: DataKey | None):
        self.compression = bool(compression)
        self.data_key = data_key
        self._aead = None if data_key is None else AESGCM(data_key.key)

    @property
    def identity(self) -> bool:
        """Neither transform: stored bytes are the original bytes."""
        return not self.compression and self.data_key is None

    def transform(self, data) -> bytes:
        """A `.log` chunk as stored (indexes are only encrypted: `encrypt`)."""
        if self.compression:
            data = compress_chunk(data)
        return self.encrypt(data)

    def encrypt(self, data) -> bytes:
        if self._aead is None:
            return bytes(data)
        iv = os.urandom(IV_SIZE)
        return iv + self._aead.encrypt(iv, bytes(data), self.data_key.aad)

    def decrypt(self, data, object_key: str, chunk: int | None) -> bytes:
        if self._aead is None:
            return data
        where = _where(object_key, chunk)
        if len(data) < GCM_OVERHEAD:
            raise CorruptRemoteObjectError(
                f"{where}: {len(data)} bytes cannot hold an AES-GCM IV and tag",
                object_key=object_key, chunk=chunk)
        view = memoryview(data)
        try:
            return self._aead.decrypt(bytes(view[:IV_SIZE]), view[IV_SIZE:],
                                      self.data_key.aad)
        except InvalidTag:
            raise CorruptRemoteObjectError(
                f"{where}: AES-GCM tag does not verify (damaged bytes, or another segment's "
                "data key)", object_key=object_key, chunk=chunk) from None

    def detransform(self, data, original_size: int, object_key: str,
                    chunk: int | None) -> bytes:
        """The original bytes of a stored chunk (or index, `chunk` None), which must be
        exactly `original_size` bytes. CorruptRemoteObjectError naming the object and chunk
        otherwise."""
        plain = self.decrypt(data, object_key, chunk)
        if self.compression and chunk is not None:
            plain = _decompress(plain, original_size, object_key, chunk)
        if len(plain) != original_size:
            raise CorruptRemoteObjectError(
                f"{_where(object_key, chunk)}: {len(plain)} bytes where the manifest says "
                f"{original_size}", object_key=object_key, chunk=chunk)
        return plain

    def __repr__(self):
        return (f"ChunkTransform(compression={self.compression}, "
                f"encryption={self.data_key is not None})")


def _where(object_key: str, chunk: int | None) -> str:
    return f"{object_key} chunk {chunk}" if chunk is not None else object_key


def _decompress(data, original_size: int, object_key: str, chunk: int) -> bytes:
    try:
        size = zstandard.get_frame_parameters(data).content_size
    except zstandard.ZstdError as exc:
        raise CorruptRemoteObjectError(f"{object_key} chunk {chunk}: not a zstd frame ({exc})",
                                       object_key=object_key, chunk=chunk) from None
    if size != original_size:
        stated = "no size" if size == zstandard.CONTENTSIZE_UNKNOWN else f"{size} bytes"
        raise CorruptRemoteObjectError(
            f"{object_key} chunk {chunk}: the zstd frame states {stated}, the manifest "
            f"{original_size} bytes", object_key=object_key, chunk=chunk)
    try:
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=original_size,
                                                       allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise CorruptRemoteObjectError(f"{object_key} chunk {chunk}: bad zstd frame ({exc})",
                                       object_key=object_key, chunk=chunk) from None


# ---- compression heuristic ---------------------------------------------------------------

def first_batch_compressed(path) -> bool | None:
    """Whether the segment's first record batch is compressed: True/False for a batch whose
    CRC checks, None when there is no whole valid first batch (the plugin then uploads
    uncompressed). Reads only the first batch."""
    try:
        with open(path, "rb") as f:
            head = f.read(_LENGTH_END)
            if len(head) < _LENGTH_END:
                return None
            length = int.from_bytes(head[8:12], "big", signed=True)
            if not 0 < length <= _MAX_FIRST_BATCH:
                return None
            batch = head + f.read(length)
    except OSError:
        return None
    try:
        scan = scan_batches(batch, verify_crc=True)
    except ValueError:
        return None
    if len(scan) != 1 or not scan.headers[0]["crc_valid"]:
        return None
    return bool(scan.headers[0]["compression"] != 0)
