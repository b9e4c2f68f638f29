"""Per-chunk transforms of the object-store tier: zstd frames, AES-256-GCM chunks, the
RSA-OAEP (SHA3-512) envelope, key loading, and damaged chunks."""

import hashlib
import os

import pytest
import zstandard
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from engine.errors import ConfigError, CorruptRemoteObjectError, RemoteEncryptionKeyError
from engine.records import CompressionType, RecordBatchBuilder
from engine.remote.objectstore.manifest import EncryptionMetadata
from engine.remote.objectstore.transforms import (
    ChunkTransform,
    KeyRing,
    first_batch_compressed,
)


def write_key_pair(directory, name, key=None):
    """(public PEM path, private PEM path) of a fresh 2048-bit RSA key, as the plugin's
    docs make them (X.509 SPKI public, PKCS#8 private)."""
    key = key or rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = directory / f"{name}-public.pem"
    private = directory / f"{name}-private.pem"
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return str(public), str(private), key


def _config_key(key_id, kind):
    return f"encryption.key.pairs.{key_id}.{kind}.key.file"


@pytest.fixture(scope="module")
def ring_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    pub1, priv1, key1 = write_key_pair(d, "k1")
    pub2, priv2, key2 = write_key_pair(d, "k2")
    return {"k1": (pub1, priv1), "k2": (pub2, priv2)}, {"k1": key1, "k2": key2}, d


def _mgf1(seed: bytes, length: int, h) -> bytes:
    out = b""
    counter = 0
    while len(out) < length:
        out += h(seed + counter.to_bytes(4, "big")).digest()
        counter += 1
    return out[:length]


def _oaep_decode_by_hand(key: rsa.RSAPrivateKey, wrapped: bytes, h) -> bytes | None:
    """RFC 8017 7.1.2 with hash `h` for both the label hash and MGF1: independent of the
    library that wrapped the key, so the digests the engine uses are checked."""
    nums = key.private_numbers()
    k = (nums.public_numbers.n.bit_length() + 7) // 8
    em = pow(int.from_bytes(wrapped, "big"), nums.d, nums.public_numbers.n).to_bytes(k, "big")
    hlen = h().digest_size
    masked_seed, masked_db = em[1:1 + hlen], em[1 + hlen:]
    seed = bytes(a ^ b for a, b in zip(masked_seed, _mgf1(masked_db, hlen, h)))
    db = bytes(a ^ b for a, b in zip(masked_db, _mgf1(seed, k - hlen - 1, h)))
    if em[0] != 0 or db[:hlen] != h(b"").digest():
        return None
    rest = db[hlen:].lstrip(b"\0")
    return rest[1:] if rest[:1] == b"\1" else None


def test_data_key_is_wrapped_with_oaep_sha3_512_for_hash_and_mgf1(ring_files):
    files, keys, _ = ring_files
    ring = KeyRing.load("k1", files, _config_key)
    dk = ring.new_data_key()
    assert len(dk.key) == 32 and len(dk.aad) == 32
    assert dk.metadata.key_id == "k1" and len(dk.metadata.wrapped_data_key) == 256
    wrapped = dk.metadata.wrapped_data_key
    assert _oaep_decode_by_hand(keys["k1"], wrapped, hashlib.sha3_512) == dk.key
    # SHA-256 (SunJCE's default for MGF1) would not decode it
    assert _oaep_decode_by_hand(keys["k1"], wrapped, hashlib.sha256) is None
    assert ring.unwrap(dk.metadata, "m").key == dk.key
    # a fresh DEK, AAD and OAEP seed each time
    other = ring.new_data_key()
    assert other.key != dk.key and other.aad != dk.aad
    assert "k1" in repr(dk) and dk.key.hex() not in repr(dk) and dk.key.hex() not in repr(ring)


def test_unwrap_names_the_key_pair(ring_files, tmp_path):
    files, _, _ = ring_files
    ring = KeyRing.load("k1", files, _config_key)
    dk = ring.new_data_key()
    only_k2 = KeyRing.load("k2", {"k2": files["k2"]}, _config_key)
    with pytest.raises(RemoteEncryptionKeyError, match="'k1', which is not in") as info:
        only_k2.unwrap(dk.metadata, "pre/x.rsm-manifest")
    assert info.value.key_id == "k1" and info.value.object_key == "pre/x.rsm-manifest"
    # another key under the same id
    pub, priv, _ = write_key_pair(tmp_path, "other")
    impostor = KeyRing.load("k1", {"k1": (pub, priv)}, _config_key)
    with pytest.raises(RemoteEncryptionKeyError, match="'k1' does not unwrap"):
        impostor.unwrap(dk.metadata, "m")
    damaged = EncryptionMetadata("k1", bytes(256), dk.aad)
    with pytest.raises(RemoteEncryptionKeyError, match="does not unwrap"):
        ring.unwrap(damaged, "m")


def test_bad_key_files_name_their_config_key(ring_files, tmp_path):
    files, _, _ = ring_files
    (tmp_path / "junk.pem").write_text("not a key")
    ec_key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "ec.pem").write_bytes(ec_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    cases = [
        ({"k1": (str(tmp_path / "missing.pem"), files["k1"][1])},
         "encryption.key.pairs.k1.public.key.file", "Errno 2"),
        ({"k1": (files["k1"][0], str(tmp_path / "junk.pem"))},
         "encryption.key.pairs.k1.private.key.file", "PKCS#8"),
        ({"k1": (str(tmp_path / "ec.pem"), files["k1"][1])},
         "encryption.key.pairs.k1.public.key.file", "not an RSA key"),
        ({"k1": (files["k1"][0], files["k2"][1])},
         "encryption.key.pairs.k1.private.key.file", "not the private key"),
    ]
    for pairs, config_key, match in cases:
        with pytest.raises(ConfigError, match=match) as info:
            KeyRing.load("k1", pairs, _config_key)
        assert info.value.key == config_key


@pytest.mark.parametrize("compression,encryption", [(False, False), (True, False),
                                                    (False, True), (True, True)])
def test_chunk_roundtrip_and_layout(ring_files, compression, encryption):
    files, _, _ = ring_files
    dk = KeyRing.load("k1", files, _config_key).new_data_key() if encryption else None
    t = ChunkTransform(compression, dk)
    plain = os.urandom(3000) + bytes(5000)
    stored = t.transform(plain)
    assert t.detransform(stored, len(plain), "o.log", 3) == plain
    assert t.identity == (not compression and not encryption)
    inner = stored
    if encryption:
        iv, body = stored[:12], stored[12:]
        inner = AESGCM(dk.key).decrypt(iv, body, dk.aad)  # IV || ciphertext || tag
        assert len(stored) == 12 + len(inner) + 16
        assert t.transform(plain)[:12] != iv  # a fresh IV per chunk
    if compression:
        assert zstandard.get_frame_parameters(inner).content_size == len(plain)
        assert zstandard.ZstdDecompressor().decompress(inner) == plain
    else:
        assert inner == plain


def test_damaged_chunks_name_object_and_chunk(ring_files):
    files, _, _ = ring_files
    ring = KeyRing.load("k1", files, _config_key)
    t = ChunkTransform(True, ring.new_data_key())
    stored = bytearray(t.transform(b"x" * 1000))
    stored[20] ^= 1
    with pytest.raises(CorruptRemoteObjectError, match="o.log chunk 7: AES-GCM tag") as info:
        t.detransform(bytes(stored), 1000, "o.log", 7)
    assert (info.value.object_key, info.value.chunk) == ("o.log", 7)
    with pytest.raises(CorruptRemoteObjectError, match="cannot hold an AES-GCM"):
        t.detransform(b"short", 1000, "o.log", 7)
    # another segment's key
    other = ChunkTransform(True, ring.new_data_key())
    with pytest.raises(CorruptRemoteObjectError, match="tag does not verify"):
        other.detransform(t.transform(b"x" * 1000), 1000, "o.log", 0)
    z = ChunkTransform(True, None)
    with pytest.raises(CorruptRemoteObjectError, match="chunk 2: not a zstd frame"):
        z.detransform(b"garbage!" * 4, 1000, "o.log", 2)
    frame = bytearray(z.transform(os.urandom(1000)))
    frame[-3] ^= 0xFF
    frame[8] ^= 0xFF
    with pytest.raises(CorruptRemoteObjectError, match="chunk 2"):
        z.detransform(bytes(frame), 1000, "o.log", 2)
    with pytest.raises(CorruptRemoteObjectError, match="states 1000 bytes, the manifest 999"):
        z.detransform(z.transform(b"y" * 1000), 999, "o.log", 2)
    plain = ChunkTransform(False, None)
    with pytest.raises(CorruptRemoteObjectError, match="chunk 4: 10 bytes where the manifest "
                                                       "says 12"):
        plain.detransform(b"0123456789", 12, "o.log", 4)


def test_first_batch_heuristic(tmp_path):
    def segment(codec):
        b = RecordBatchBuilder(compression_type=codec)
        b.extend([b"v" * 100] * 10)
        path = tmp_path / f"{int(codec)}.log"
        path.write_bytes(b.build() + b.build())
        return path

    assert first_batch_compressed(segment(CompressionType.NONE)) is False
    assert first_batch_compressed(segment(CompressionType.ZSTD)) is True
    assert first_batch_compressed(segment(CompressionType.LZ4)) is True
    bad = segment(CompressionType.NONE).read_bytes()
    (tmp_path / "bad.log").write_bytes(bad[:20] + bytes([bad[20] ^ 1]) + bad[21:])
    assert first_batch_compressed(tmp_path / "bad.log") is None  # CRC fails
    (tmp_path / "empty.log").write_bytes(b"")
    assert first_batch_compressed(tmp_path / "empty.log") is None
    (tmp_path / "cut.log").write_bytes(bad[:30])
    assert first_batch_compressed(tmp_path / "cut.log") is None


def test_the_jdk_unwraps_the_data_key(ring_files, tmp_path):
    """The JDK's RSA-OAEP with SHA3-512 for hash and MGF1 (tests/java/OaepUnwrap.java)
    recovers the engine's data key: the wrap is the plugin's, checked by another
    implementation. Java is needed by the Spark tests already; its absence fails."""
    import base64
    import shutil
    import subprocess
    from pathlib import Path

    javac, java = shutil.which("javac"), shutil.which("java")
    if not javac or not java:
        pytest.fail("a JDK (javac, java) is required: install openjdk-17-jdk", pytrace=False)
    source = Path(__file__).with_name("java") / "OaepUnwrap.java"
    subprocess.run([javac, "-d", str(tmp_path), str(source)], check=True, timeout=120)
    files, _, _ = ring_files
    dk = KeyRing.load("k1", files, _config_key).new_data_key()
    out = subprocess.run([java, "-cp", str(tmp_path), "OaepUnwrap", files["k1"][1],
                          base64.b64encode(dk.metadata.wrapped_data_key).decode()],
                         check=True, capture_output=True, text=True, timeout=120)
    assert base64.b64decode(out.stdout.strip()) == dk.key
