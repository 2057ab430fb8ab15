"""C's arithmetic types as polycomp dtypes, and C's conversion rules (LP64, x86-64 and
AArch64 Linux: ``char`` is signed 8-bit, ``long`` is 64-bit).

    type_of_words(["unsigned", "int"])  -> "uint32"
    common("int32", "uint32")           -> "uint32"   (C11 6.3.1.8, usual arithmetic conversions)
    promote("int16")                    -> "int32"    (integer promotions)
    literal("10UL")                     -> ("uint64", 10)

Every expression the frontend builds carries the dtype C would give it, and every implicit
conversion C performs becomes an explicit Cast, so the generated C computes exactly what
the user's C computes.
"""

from __future__ import annotations

import math
import platform
import re
from fractions import Fraction

import numpy as np

# sorted type words -> dtype
_WORDS: dict[tuple[str, ...], str] = {}


def _register(dtype: str, *spellings: str) -> None:
    for spelling in spellings:
        _WORDS[tuple(sorted(spelling.split()))] = dtype


# plain char is unsigned on ARM, POWER and s390 Linux, signed on x86
PLAIN_CHAR = ("uint8" if platform.machine().lower().startswith(("arm", "aarch64", "ppc", "powerpc",
                                                                 "s390"))
              else "int8")

_register("bool", "_Bool")
_register(PLAIN_CHAR, "char")
_register("int8", "signed char")
_register("uint8", "unsigned char")
_register("int16", "short", "short int", "signed short", "signed short int")
_register("uint16", "unsigned short", "unsigned short int")
_register("int32", "int", "signed", "signed int")
_register("uint32", "unsigned", "unsigned int")
_register("int64", "long", "long int", "signed long", "signed long int", "long long",
          "long long int", "signed long long", "signed long long int")
_register("uint64", "unsigned long", "unsigned long int", "unsigned long long",
          "unsigned long long int")
_register("float32", "float")
_register("float64", "double")

QUALIFIERS = frozenset(("const", "volatile", "restrict", "register", "static", "inline",
                        "auto", "extern"))

RANK = {"bool": 0, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 3, "uint32": 3,
        "int64": 4, "uint64": 4}

C_NAMES = {"bool": "_Bool", "int8": "char", "uint8": "unsigned char", "int16": "short",
           "uint16": "unsigned short", "int32": "int", "uint32": "unsigned int",
           "int64": "long", "uint64": "unsigned long", "float32": "float", "float64": "double"}


def type_of_words(words: list[str] | tuple[str, ...]) -> str | None:
    """The dtype of a list of C type words (qualifiers ignored), or None if not arithmetic."""
    key = tuple(sorted(w for w in words if w not in QUALIFIERS))
    return _WORDS.get(key)


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def is_integer(dtype: str) -> bool:
    """Integer in C's sense: _Bool and the char/short/int/long types."""
    return dtype in RANK


def is_signed(dtype: str) -> bool:
    return dtype.startswith("int") or is_float(dtype)


def promote(dtype: str) -> str:
    """Integer promotions: everything narrower than int becomes int."""
    return "int32" if dtype in RANK and RANK[dtype] < RANK["int32"] else dtype


def common(a: str, b: str) -> str:
    """The usual arithmetic conversions: the type both operands of ``a op b`` become."""
    for f in ("float64", "float32"):
        if f in (a, b):
            return f
    a, b = promote(a), promote(b)
    if a == b:
        return a
    if is_signed(a) == is_signed(b):
        return a if RANK[a] >= RANK[b] else b
    unsigned, signed = (a, b) if is_signed(b) else (b, a)
    if RANK[unsigned] >= RANK[signed]:
        return unsigned
    if np.dtype(signed).itemsize > np.dtype(unsigned).itemsize:
        return signed
    return "u" + signed


def fits(value: int, dtype: str) -> bool:
    info = np.iinfo(np.dtype(dtype))
    return int(info.min) <= value <= int(info.max)


def wrap(value: int, dtype: str) -> int:
    """``value`` converted to an integer dtype modulo 2^bits (C's conversion to unsigned,
    and gcc's documented behaviour for signed)."""
    bits = np.dtype(dtype).itemsize * 8
    value %= 1 << bits
    if is_signed(dtype) and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


# ----------------------------------------------------------------------------- literals

_INT = re.compile(r"(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)([uUlL]*)\Z")
_FLOAT_SUFFIX = re.compile(r"[fFlL]\Z")

# suffix class -> candidate types (C11 6.4.4.1): (decimal, octal/hex)
_CANDIDATES = {
    "": (("int32", "int64"), ("int32", "uint32", "int64", "uint64")),
    "u": (("uint32", "uint64"), ("uint32", "uint64")),
    "l": (("int64",), ("int64", "uint64")),
    "ul": (("uint64",), ("uint64",)),
}


class LiteralError(ValueError):
    """A literal the frontend cannot type (reported with a location by the caller)."""


def int_literal(text: str) -> tuple[str, int]:
    """(dtype, value) of a C integer constant."""
    match = _INT.match(text)
    if not match:
        raise LiteralError(f"cannot read integer constant {text!r}")
    digits, suffix = match.groups()
    suffix = suffix.lower()
    if suffix not in ("", "u", "l", "ll", "ul", "lu", "ull", "llu"):
        raise LiteralError(f"unknown integer suffix in {text!r}")
    decimal = not digits.startswith("0") or digits == "0"
    if digits.lower().startswith("0x"):
        value = int(digits[2:], 16)
    elif digits.lower().startswith("0b"):
        value = int(digits[2:], 2)
    elif digits.startswith("0") and len(digits) > 1:
        value = int(digits[1:], 8)
    else:
        value = int(digits)
    key = ("u" if "u" in suffix else "") + ("l" if "l" in suffix else "")
    for dtype in _CANDIDATES[key][0 if decimal else 1]:
        if fits(value, dtype):
            return dtype, value
    raise LiteralError(f"integer constant {text} is too large")


def float_literal(text: str) -> tuple[str, float]:
    """(dtype, value) of a C floating constant, rounded as a C compiler rounds it."""
    dtype = "float64"
    body = text
    if _FLOAT_SUFFIX.search(text):
        if text[-1] in "lL":
            raise LiteralError(f"long double constant {text} is not supported")
        dtype, body = "float32", text[:-1]
    try:
        if body.lower().startswith("0x"):
            exact = Fraction(float.fromhex(body))  # hex floats are exact in double
            value = float(exact)
        else:
            exact = Fraction(body)
            value = float(body)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise LiteralError(f"cannot read floating constant {text!r}") from None
    if dtype == "float32":
        value = nearest_float32(exact)
    if not math.isfinite(value):
        raise LiteralError(f"floating constant {text} is out of range for {dtype}")
    return dtype, value


def nearest_float32(exact: Fraction) -> float:
    """The float32 nearest to an exact rational (ties to even), as a Python float."""
    guess = np.float32(float(exact)) if abs(exact) < Fraction(2) ** 1000 else np.float32(np.inf)
    if not np.isfinite(guess):
        return float(guess)
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess,
                  np.nextafter(guess, np.float32(np.inf))]
    finite = [c for c in candidates if np.isfinite(c)]
    best = min(finite, key=lambda c: (abs(Fraction(float(c)) - exact),
                                      int(np.array(c, np.float32).view(np.uint32)) & 1))
    return float(best)


_ESCAPES = {"n": 10, "t": 9, "r": 13, "0": 0, "a": 7, "b": 8, "f": 12, "v": 11, "\\": 92,
            "'": 39, '"': 34, "?": 63}


def char_literal(text: str) -> tuple[str, int]:
    """(dtype, value) of a plain character constant: an int, as in C."""
    if len(text) < 3 or text[0] != "'" or text[-1] != "'":
        raise LiteralError(f"unsupported character constant {text}")
    body = text[1:-1]
    if len(body) == 1 and body != "\\":
        return "int32", wrap(ord(body), PLAIN_CHAR) if ord(body) < 128 else _bad(text)
    if body.startswith("\\x") and len(body) > 2:
        return "int32", wrap(int(body[2:], 16), PLAIN_CHAR)
    if body.startswith("\\") and body[1:].isdigit() and set(body[1:]) <= set("01234567"):
        return "int32", wrap(int(body[1:], 8), PLAIN_CHAR)
    if len(body) == 2 and body[0] == "\\" and body[1] in _ESCAPES:
        return "int32", _ESCAPES[body[1]]
    return _bad(text)


def _bad(text: str):  # noqa: ANN202
    raise LiteralError(f"unsupported character constant {text}")
