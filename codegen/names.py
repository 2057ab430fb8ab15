"""C-safe identifiers for names that come from user input.

A user name is kept when it is a plain identifier that cannot clash with C, the C
library, or the names generated code uses itself (loop iterators ``c0, c1, ...``,
helpers ``polycomp_*``); any other name is escaped injectively: ``u_`` followed by the
name with ``_`` doubled and other characters as ``_xx`` hex codes. ``u_`` names are
escaped too, so no two user names ever share a C name.
"""

from __future__ import annotations

import re

C_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef
union unsigned void volatile while _Bool _Complex _Imaginary _Alignas _Alignof _Atomic
_Generic _Noreturn _Static_assert _Thread_local _Float16 bool true false NULL asm typeof
""".split())

# Names the generated code uses from <math.h>, <stdint.h>, <stdbool.h>, <omp.h>, <stddef.h>.
C_LIBRARY = frozenset("""
exp expf log logf sqrt sqrtf tanh tanhf erf erff fabs fabsf fmax fmaxf fmin fminf pow powf
fma fmaf sin sinf cos cosf floor floorf ceil ceilf abs labs llabs min max main errno
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t ptrdiff_t
omp_get_num_threads omp_get_thread_num omp_set_num_threads INFINITY NAN HUGE_VAL
""".split())

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_GENERATED = re.compile(r"(c\d+|polycomp_.*|u_.*|_.*|S\d+)\Z")


def c_name(name: str) -> str:
    """The C identifier for a user name (identity for ordinary names)."""
    if _IDENT.match(name) and name not in C_KEYWORDS and name not in C_LIBRARY \
            and not _GENERATED.match(name):
        return name
    out = []
    for ch in name:
        if ch == "_":
            out.append("__")
        elif ch.isascii() and ch.isalnum():
            out.append(ch)
        else:
            out.append("".join(f"_{b:02x}" for b in ch.encode("utf-8")))
    return "u_" + "".join(out)
