"""Checksums and hashes: engine.checksums and every CRC-32C implementation of engine._native.crc.

References: the `crc32c` package (CRC-32C), zlib (CRC-32), the `xxhash` package when installed
and LZ4 frames written by the `lz4` package (XXH32), the values Kafka's own UtilsTest states
(murmur2), and RFC 3720 appendix B.4 (CRC-32C vectors).
"""

import mmap
import os
import random
import subprocess
import sys
import threading
import zlib

import crc32c as crc32c_pkg
import lz4.frame
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import checksums
from engine._native import crc as native

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMPLS = native.crc32c_implementations()
M32 = 0xFFFFFFFF

# One random buffer shared by the comparison tests: 300 KiB plus room for 64 start offsets.
_RNG = random.Random(20260)
BIG = _RNG.randbytes(300 * 1024 + 64)

# Lengths around every threshold the kernels switch at (16/64-byte folds, 256-byte AVX-512
# blocks, 3x128/3x512/3x4096 crc32 streams, 16 KiB head alignment).
EDGE_LENGTHS = sorted(set(
    list(range(136))
    + [n + d for n in (192, 256, 320, 384, 512, 1024, 1536, 2048, 4096, 12288, 16384, 65536)
       for d in (-1, 0, 1, 15, 63)]
    + [300 * 1024 - 1]
))


def _all_crc32c(data, value=0):
    """{implementation: result} for every implementation available here."""
    return {name: native.crc32c_with(name, data, value) for name in IMPLS}


# ------------------------------------------------------------------ CRC-32C: known vectors

ISCSI_READ_PDU = bytes.fromhex(
    "01c00000000000000000000000000000"
    "14000000000004000000001400000018"
    "28000000000000000200000000000000"
)

RFC3720_VECTORS = [  # RFC 3720, B.4 "CRC Examples"
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (ISCSI_READ_PDU, 0xD9963A56),
    (b"123456789", 0xE3069283),
]


@pytest.mark.parametrize("data,expected", RFC3720_VECTORS)
def test_crc32c_known_vectors_in_every_implementation(data, expected):
    assert checksums.crc32c(data) == expected
    assert _all_crc32c(data) == {name: expected for name in IMPLS}


def test_crc32c_of_nothing_returns_the_value_given():
    assert checksums.crc32c(b"") == 0
    assert checksums.crc32c(b"", 0xDEADBEEF) == 0xDEADBEEF


# ------------------------------------------------- CRC-32C: implementations vs the package

@pytest.mark.parametrize("offset", range(64))
def test_every_implementation_matches_crc32c_package_at_every_alignment(offset):
    view = memoryview(BIG)
    for n in EDGE_LENGTHS:
        piece = view[offset:offset + n]
        expected = crc32c_pkg.crc32c(piece)
        got = _all_crc32c(piece)
        assert got == {name: expected for name in IMPLS}, (offset, n)


@settings(max_examples=150, deadline=None)
@given(offset=st.integers(0, 63), length=st.integers(0, 300 * 1024),
       value=st.integers(0, M32), cut=st.floats(0, 1))
def test_every_implementation_matches_package_on_random_lengths_and_chains(
        offset, length, value, cut):
    piece = memoryview(BIG)[offset:offset + length]
    expected = crc32c_pkg.crc32c(piece, value)
    split = int(length * cut)
    for name in IMPLS:
        assert native.crc32c_with(name, piece, value) == expected, name
        first = native.crc32c_with(name, piece[:split], value)
        assert native.crc32c_with(name, piece[split:], first) == expected, name


def test_chained_calls_in_many_pieces_equal_one_call():
    data = BIG[: 200_000]
    cuts = sorted(_RNG.sample(range(1, len(data)), 40))
    for name in IMPLS:
        crc, start = 0, 0
        for end in cuts + [len(data)]:
            crc = native.crc32c_with(name, data[start:end], crc)
            start = end
        assert crc == crc32c_pkg.crc32c(data), name


@pytest.mark.parametrize("length", [0, 1, 7, 100, 4096, 100_000])
def test_crc32c_combine_equals_crc_of_concatenation(length):
    a, b = BIG[:1234], BIG[5000:5000 + length]
    assert checksums.crc32c_combine(checksums.crc32c(a), checksums.crc32c(b), len(b)) == \
        checksums.crc32c(a + b)


# ------------------------------------------- CRC-32C: folding constants, derived in Python

P_CASTAGNOLI = 0x11EDC6F41  # x^32 + x^28 + ... + 1, coefficient of x^i in bit i


def _gf2_mulmod(a, b, poly=P_CASTAGNOLI):
    product = 0
    while b:
        if b & 1:
            product ^= a
        a <<= 1
        if a >> 32:
            a ^= poly
        b >>= 1
    return product


def _xpow_mod(n):
    result, base = 1, 2  # the polynomials 1 and x
    while n:
        if n & 1:
            result = _gf2_mulmod(result, base)
        base = _gf2_mulmod(base, base)
        n >>= 1
    return result


def _reflect32(v):
    return int(f"{v:032b}"[::-1], 2)


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 95, 1000, 2**20, 2**40 + 12345, 2**64 - 1])
def test_xpow_matches_independent_polynomial_arithmetic(n):
    assert native._crc32c_xpow(n) == _reflect32(_xpow_mod(n))


@pytest.mark.parametrize("distance", [128, 256, 384, 512, 1024, 1536, 2048])
def test_folding_constants_are_x_to_the_d_plus_31_and_d_minus_33(distance):
    assert native._crc32c_fold_constants(distance) == (
        _reflect32(_xpow_mod(distance + 31)), _reflect32(_xpow_mod(distance - 33)))


def test_folding_constants_for_an_unused_distance_raise():
    with pytest.raises(ValueError):
        native._crc32c_fold_constants(96)


# ----------------------------------------------------------- CRC-32C: implementation choice

def test_the_chosen_implementation_is_available_and_portable_always_is():
    assert "portable" in IMPLS
    assert checksums.crc32c_implementation() in IMPLS
    assert set(IMPLS) <= set(native._crc32c_known_implementations())


def test_unknown_implementation_raises_value_error():
    with pytest.raises(ValueError, match="unknown"):
        native.crc32c_with("no-such-impl", b"abc")


def test_unavailable_implementation_is_reported():
    missing = [n for n in native._crc32c_known_implementations() if n not in IMPLS]
    if not missing:
        pytest.skip("every known implementation runs here")
    with pytest.raises(checksums.ImplementationUnavailableError, match="unavailable"):
        native.crc32c_with(missing[0], b"abc")
    assert issubclass(checksums.ImplementationUnavailableError, RuntimeError)


def _run_with_env(**env):
    code = ("from engine._native import crc; "
            "print(crc.crc32c_implementation(), crc.crc32c(b'123456789'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, text=True,
                         capture_output=True, env=dict(os.environ, **env)).stdout.split()
    return out[0], int(out[1])


@pytest.mark.parametrize("name", IMPLS)
def test_environment_variable_forces_an_available_implementation(name):
    assert _run_with_env(ENGINE_CRC32C_IMPL=name) == (name, 0xE3069283)


def test_environment_variable_naming_nothing_usable_is_ignored():
    assert _run_with_env(ENGINE_CRC32C_IMPL="bogus") == (IMPLS[-1], 0xE3069283)


# ------------------------------------------------------------------------------- buffers

def test_accepts_every_contiguous_buffer_type_without_copy(tmp_path):
    data = BIG[:10_000]
    expected = crc32c_pkg.crc32c(data)
    path = tmp_path / "blob"
    path.write_bytes(data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert checksums.crc32c(mm) == expected
    for buf in (data, bytearray(data), memoryview(data), np.frombuffer(data, np.uint8),
                np.frombuffer(data, np.int64)):
        assert checksums.crc32c(buf) == expected
        assert checksums.crc32(buf) == zlib.crc32(data)


def test_rejects_non_buffers_and_non_contiguous_buffers():
    with pytest.raises(TypeError):
        checksums.crc32c("text")
    with pytest.raises((BufferError, ValueError)):
        checksums.crc32c(np.arange(100, dtype=np.uint8)[::2])
    with pytest.raises(OverflowError):
        checksums.crc32c(b"abc", -1)
    with pytest.raises(OverflowError):
        checksums.crc32c(b"abc", 2**32)


def test_concurrent_large_calls_give_right_answers():
    buffers = [bytes([i]) * 1024 + BIG[i: i + 300_000] * 20 for i in range(4)]
    expected = [crc32c_pkg.crc32c(b) for b in buffers]
    expected_ieee = [zlib.crc32(b) for b in buffers]
    errors = []
    start = threading.Barrier(len(buffers))

    def work(i):
        start.wait()
        for _ in range(5):
            if checksums.crc32c(buffers[i]) != expected[i]:
                errors.append(("crc32c", i))
            if checksums.crc32(buffers[i]) != expected_ieee[i]:
                errors.append(("crc32", i))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(buffers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# -------------------------------------------------------------------------------- CRC-32

@pytest.mark.parametrize("offset", [0, 1, 3, 7])
def test_crc32_matches_zlib(offset):
    view = memoryview(BIG)
    for n in list(range(70)) + [255, 4096, 4097, 300 * 1024 - 7]:
        piece = view[offset:offset + n]
        assert checksums.crc32(piece) == zlib.crc32(piece)
        assert checksums.crc32(piece, 0x12345678) == zlib.crc32(piece, 0x12345678)
    assert checksums.crc32(b"123456789") == 0xCBF43926


# --------------------------------------------------------------------------------- XXH32

def test_xxh32_known_value_of_empty_input():
    assert checksums.xxh32(b"") == 0x02CC5D05


@pytest.mark.parametrize("length", [0, 1, 3, 4, 15, 16, 17, 31, 32, 100, 4095, 70_000])
def test_xxh32_matches_lz4_frame_content_checksum(length):
    data = BIG[:length]
    frame = lz4.frame.compress(data, content_checksum=True)
    assert checksums.xxh32(data) == int.from_bytes(frame[-4:], "little")


@pytest.mark.parametrize("store_size", [False, True])
def test_xxh32_matches_lz4_frame_header_checksum(store_size):
    frame = lz4.frame.compress(b"kafka", store_size=store_size)
    descriptor_end = 6 + (8 if frame[4] & 0x08 else 0) + (4 if frame[4] & 0x01 else 0)
    assert (checksums.xxh32(frame[4:descriptor_end]) >> 8) & 0xFF == frame[descriptor_end]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), seed=st.integers(0, M32))
def test_xxh32_matches_xxhash_package(data, seed):
    import xxhash  # a test extra
    assert checksums.xxh32(data, seed) == xxhash.xxh32_intdigest(data, seed=seed)


# ------------------------------------------------------------------------------- murmur2

# Values stated by Kafka's own tests (clients/.../common/utils/UtilsTest.java, testMurmur2).
KAFKA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize("key,expected", KAFKA_MURMUR2)
def test_murmur2_matches_kafka_utils_test(key, expected):
    assert checksums.murmur2(key) == expected


def _murmur2_java(data):
    """Kafka's Utils.murmur2 transcribed with Java int semantics (the test's oracle)."""
    m, h = 0x5BD1E995, (0x9747B28C ^ len(data)) & M32
    for i in range(0, len(data) - len(data) % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little") * m & M32
        k = (k ^ (k >> 24)) * m & M32
        h = (h * m & M32) ^ k
    base, rest = len(data) & ~3, len(data) % 4
    if rest == 3:
        h ^= data[base + 2] << 16
    if rest >= 2:
        h ^= data[base + 1] << 8
    if rest >= 1:
        h = (h ^ data[base]) * m & M32
    h = (h ^ (h >> 13)) * m & M32
    h ^= h >> 15
    return h - (1 << 32) if h >> 31 else h


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_follows_java_semantics_on_any_bytes(data):
    assert checksums.murmur2(data) == _murmur2_java(data)


def test_to_positive_clears_the_sign_bit():
    assert checksums.to_positive(-1) == 0x7FFFFFFF
    assert checksums.to_positive(-(2**31)) == 0
    assert checksums.to_positive(12345) == 12345


@pytest.mark.parametrize("key,hashed", KAFKA_MURMUR2)
@pytest.mark.parametrize("num_partitions", [1, 3, 12, 100])
def test_partition_for_key_is_to_positive_murmur2_modulo(key, hashed, num_partitions):
    expected = (hashed & 0x7FFFFFFF) % num_partitions
    assert checksums.partition_for_key(key, num_partitions) == expected


def test_partition_for_key_rejects_bad_arguments():
    with pytest.raises(ValueError):
        checksums.partition_for_key(b"k", 0)
    with pytest.raises(TypeError):
        checksums.partition_for_key(None, 3)


def test_public_module_exports():
    for name in checksums.__all__:
        assert getattr(checksums, name) is not None
