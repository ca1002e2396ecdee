"""A small, dependency-free GGUF header reader used to vet model files before llama.cpp sees them.

llama.cpp answers a truncated or foreign file with a terse "failed to load model" (older builds
abort the process). :func:`read_gguf` instead parses the header (magic ``GGUF``, version, the
metadata key/values and the tensor table), computes how many bytes the tensor data needs, and
raises :class:`~engine.errors.ModelError` naming the file and what is wrong with it.
Only scalar and string metadata values are kept; arrays (the vocabulary) are skipped.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ModelError

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
_MAX_COUNT = 1 << 24  # no real model has 16M tensors or metadata keys: the header is garbage

# GGUF metadata value types -> struct format of one scalar (8 = string, 9 = array).
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
           12: "d"}
_STRING, _ARRAY = 8, 9

# ggml tensor types -> (elements per block, bytes per block). Unknown types count 0 bytes, so
# the size check stays a lower bound and never rejects a valid file of a newer type.
_GGML_TYPES = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
    14: (256, 210), 15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98),
    19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1),
    25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54),
    35: (256, 66), 39: (32, 17),
}


@dataclass
class GGUFInfo:
    """What the header of a GGUF file says."""

    path: Path
    version: int
    tensor_count: int
    file_size: int
    data_offset: int
    min_size: int  # bytes the file must have to hold every tensor
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name", "") or self.path.stem)

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return int(value) if isinstance(value, int) else None

    @property
    def has_chat_template(self) -> bool:
        return bool(self.metadata.get("tokenizer.chat_template"))


class _Truncated(Exception):
    pass


class _Reader:
    """A cursor over the mapped file; reading past the end raises ``_Truncated``."""

    def __init__(self, buf: mmap.mmap | bytes, size: int, version: int = 3):
        self.buf, self.size, self.pos, self.version = buf, size, 0, version

    def take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > self.size:
            raise _Truncated
        self.pos = start + n
        return start

    def unpack(self, fmt: str) -> Any:
        st = struct.Struct("<" + fmt)
        return st.unpack_from(self.buf, self.take(st.size))[0]

    def count(self) -> int:
        return self.unpack("I" if self.version == 1 else "Q")

    def string(self, keep: bool = True) -> str:
        n = self.count()
        start = self.take(n)
        return bytes(self.buf[start:start + n]).decode("utf-8", "replace") if keep else ""

    def value(self, vtype: int, keep: bool = True) -> Any:
        if vtype in _SCALAR:
            return self.unpack(_SCALAR[vtype])
        if vtype == _STRING:
            return self.string(keep)
        if vtype == _ARRAY:
            etype, n = self.unpack("I"), self.count()
            if n > self.size:
                raise ValueError(f"array of {n} items")
            if etype in _SCALAR:
                self.take(n * struct.calcsize("<" + _SCALAR[etype]))
            elif etype == _STRING:
                for _ in range(n):
                    self.take(self.count())
            else:  # arrays of arrays do not occur in practice; walk them anyway
                for _ in range(n):
                    self.value(etype, keep=False)
            return [n]  # only the length is kept
        raise ValueError(f"unknown metadata value type {vtype}")


def read_gguf(path: str | os.PathLike, expected_size: int | None = None) -> GGUFInfo:
    """Parse and vet the header of ``path``; raise ``ModelError`` naming the file on any problem.

    Checks, in order: the file exists and is a regular file, is not empty, starts with the
    ``GGUF`` magic, has a supported version and sane counts, holds its whole header, is at
    least as large as its tensor table says, and (when the registry knows it) has exactly
    ``expected_size`` bytes.
    """
    p = Path(path)
    if not p.exists():
        raise ModelError(f"{p}: model file not found")
    if not p.is_file():
        raise ModelError(f"{p}: not a file (a model must be a single .gguf file)")
    size = p.stat().st_size
    if size == 0:
        raise ModelError(f"{p}: the file is empty (0 bytes); the copy or download did not finish")
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
            if head != MAGIC:
                raise ModelError(f"{p}: not a GGUF model file (it starts with {head!r}, "
                                 f"not b'GGUF'); SkillDesk needs a llama.cpp .gguf file")
            if size < 24:
                raise ModelError(f"{p}: truncated GGUF file ({size} bytes, not even a header)")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                info = _parse(p, mm, size)
    except OSError as exc:
        raise ModelError(f"{p}: cannot read the model file ({exc.strerror or exc})") from exc
    if expected_size is not None and size != expected_size:
        if size < expected_size:
            raise ModelError(f"{p}: truncated ({size:,} of {expected_size:,} bytes); "
                             f"copy or install the model again")
        raise ModelError(f"{p}: unexpected size ({size:,} bytes, the registry says "
                         f"{expected_size:,}); the file is damaged or a different model")
    return info


def _parse(p: Path, mm: mmap.mmap, size: int) -> GGUFInfo:
    r = _Reader(mm, size)
    r.take(4)
    version = r.unpack("I")
    if version not in SUPPORTED_VERSIONS:
        raise ModelError(f"{p}: unsupported GGUF version {version} "
                         f"(llama.cpp reads versions 2 and 3); convert the model again")
    r.version = version
    try:
        n_tensors, n_kv = r.count(), r.count()
        if n_tensors > _MAX_COUNT or n_kv > _MAX_COUNT:
            raise ValueError(f"{n_tensors} tensors, {n_kv} metadata keys")
        meta: dict[str, Any] = {}
        for _ in range(n_kv):
            key = r.string()
            meta[key] = r.value(r.unpack("I"))
        need = 0
        for _ in range(n_tensors):
            r.string(keep=False)
            n_dims = r.unpack("I")
            if n_dims > 8:
                raise ValueError(f"a tensor with {n_dims} dimensions")
            n_el = 1
            for _ in range(n_dims):
                n_el *= r.unpack("Q")
            ttype, offset = r.unpack("I"), r.unpack("Q")
            block, nbytes = _GGML_TYPES.get(ttype, (1, 0))
            need = max(need, offset + (n_el // block) * nbytes)
    except _Truncated:
        raise ModelError(f"{p}: truncated GGUF file ({size:,} bytes end inside the header); "
                         f"copy or download it again") from None
    except (ValueError, struct.error, UnicodeError) as exc:
        raise ModelError(f"{p}: corrupt GGUF header ({exc})") from None
    align = meta.get("general.alignment", 32)
    align = align if isinstance(align, int) and align > 0 else 32
    data_offset = -(-r.pos // align) * align
    min_size = data_offset + need
    if n_tensors == 0:
        raise ModelError(f"{p}: GGUF file without tensors (a vocabulary-only file, not a model)")
    if size < min_size:
        raise ModelError(f"{p}: truncated GGUF file ({size:,} bytes, its tensors need "
                         f"{min_size:,}); copy or download it again")
    return GGUFInfo(path=p, version=version, tensor_count=n_tensors, file_size=size,
                    data_offset=data_offset, min_size=min_size, metadata=meta)
