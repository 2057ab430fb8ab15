"""Lowered pieces -> a validated Program, its Interface, and its context.

Input: a :class:`frontend.loops.lower.Lowered`. Output: the parametric Program (its
context proved safe), the same Program with only the basic size constraints (the one
``lower(sizes)`` specialises, so that a bad size gets an OutOfBoundsError with a witness),
and the Interface in C parameter order.

The original schedule is the classic 2d+1 form, padded to one length:

    { S0[i, j] -> [0, i, 0, j, 0]; S1[i] -> [0, i, 1, 0, 0]; S2[i] -> [1, -i, 0, 0, 0] }

(S2 in a decreasing loop). The context is the set of sizes for which every access stays
inside its array -- C has no defined behaviour elsewhere -- intersected with sizes >= 0
and extents >= 0: ``corr[m - 1][m - 1] = 1.0`` gives ``m >= 1``, and
``for (i = 0; i < 5; i++) A[i] = 0`` with ``double A[n]`` gives ``n >= 5``. A parametric
kernel called outside its context raises ArgumentError; ``lower(sizes)`` raises
OutOfBoundsError with a witness for sizes outside it. Only when no size with non-empty
arrays (every extent >= 1) is safe -- ``A[i + 1]`` for ``0 <= i < n`` and ``double A[n]``
-- is the program itself wrong, and lowering raises OutOfBoundsError at once.
"""

from __future__ import annotations

from dataclasses import replace

import islpy as isl
from pycparser import c_generator

from polycomp import islutil as U
from polycomp.ir import Array, Interface, Program, ScalarArg, Statement, TensorArg

from .lower import Lowered
from .scope import ArrayVar, ScalarParam

dim = isl.dim_type


def interface(lowered: Lowered) -> Interface:
    inputs: list[TensorArg | ScalarArg] = []
    for symbol in lowered.inputs:
        if isinstance(symbol, ArrayVar):
            inputs.append(TensorArg(symbol.name, symbol.dtype, symbol.declared,
                                    updated=symbol.written))
        else:
            inputs.append(ScalarArg(symbol.name, symbol.dtype, is_size=symbol.is_size))
    return Interface(tuple(inputs), ())


def c_parameters(lowered_decls: list) -> tuple[str, ...]:
    generator = c_generator.CGenerator()
    return tuple(generator.visit(decl) for decl in lowered_decls)


def programs(lowered: Lowered) -> tuple[Program, Program]:
    """(the validated parametric Program, the same with only the basic context)."""
    params = lowered.params
    arrays = tuple(Array(a.name, a.dtype, a.shape, _role(a)) for a in lowered.arrays)
    scalars = tuple(ScalarArg(s.name, s.dtype) for s in lowered.inputs
                    if isinstance(s, ScalarParam) and not s.is_size)
    base = lowered.param_context
    for array in arrays:
        for extent in array.shape:
            base = base.intersect(extent.ge_set(U.constant_pw_aff(0, params)))
    program = _program(lowered, arrays, scalars, base.coalesce())
    nonempty = base
    for array in arrays:
        for extent in array.shape:
            nonempty = nonempty.intersect(extent.ge_set(U.constant_pw_aff(1, params)))
    valid = base.subtract(_out_of_bounds(program)).coalesce()
    if valid.intersect(nonempty).is_empty() and not nonempty.is_empty():
        _program(lowered, arrays, scalars, nonempty.coalesce()).validate()  # raises, with a witness
    return _program(lowered, arrays, scalars, valid).validate(), program


def _program(lowered: Lowered, arrays: tuple[Array, ...], scalars: tuple[ScalarArg, ...],
             context: isl.Set) -> Program:
    """The Program with ``context``; domains are cut to it too, so that no dependence exists
    only for sizes outside it (schedulers are given the context, legality checks are not)."""
    statements = [replace(s, domain=s.domain.intersect_params(context).coalesce())
                  for s in lowered.statements]
    schedule = original_schedule(statements, lowered.times, lowered.params)
    return Program(lowered.name, tuple(lowered.params), arrays, tuple(statements), schedule,
                   context, scalars)


def _role(array: ArrayVar) -> str:
    if not array.is_param:
        return "temporary"
    return "inout" if array.written else "input"


def _out_of_bounds(program: Program) -> isl.Set:
    """The sizes at which some access leaves its array."""
    bad = isl.Set.empty(U.param_space(program.params))
    for s in program.statements:
        for access in (s.write, *s.reads):
            array = program.array(access.get_tuple_name(dim.out))
            outside = access.intersect_domain(s.domain).intersect_range(
                array.bounds().complement())
            bad = bad.union(outside.params())
    return bad.coalesce()


def original_schedule(statements: list[Statement], times: list[tuple], params: list[str]
                      ) -> isl.UnionMap:
    """The 2d+1 sequential schedule (see the module docstring)."""
    length = max((len(t) for t in times), default=1)
    maps = []
    for s, time in zip(statements, times):
        space = s.domain.get_space()
        ls = isl.LocalSpace.from_space(space)
        affs = []
        for entry in tuple(time) + (0,) * (length - len(time)):
            if isinstance(entry, tuple):
                var = isl.Aff.var_on_domain(ls, dim.set, entry[0])
                affs.append(var if entry[1] > 0 else var.neg())
            else:
                affs.append(isl.Aff.val_on_domain(ls, isl.Val.int_from_si(U.CTX, entry)))
        target = isl.Space.create_from_names(U.CTX, in_=list(s.iterators),
                                             out=[f"t{k}" for k in range(length)],
                                             params=U.param_names(space))
        target = target.set_tuple_name(dim.in_, s.name)
        aff_list = isl.AffList.alloc(U.CTX, len(affs))
        for aff in affs:
            aff_list = aff_list.add(aff)
        maps.append(isl.Map.from_multi_aff(isl.MultiAff.from_aff_list(target, aff_list))
                    .intersect_domain(s.domain))
    out = U.union_map(maps)
    return out if maps else isl.UnionMap.empty(U.param_space(params))
