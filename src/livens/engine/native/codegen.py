"""A jaxpr as one C function: the whole chunk of time steps as a single compiled kernel.

XLA on a CPU runs a compiled program as a sequence of kernels ("thunks"), one per fused
operation, LAPACK call or copy, at a fixed cost each; a Newton iteration of a small system is a
hundred of them, and that fixed cost, not the arithmetic, is most of the time of a step. Here the
same program (the ``jaxpr`` that JAX traces from :func:`livens.timestep.make_loop`: the scheme's
residual, its tangent, the Newton ``while`` loop, the ``scan`` over the chunk's steps) is written
as one C function: every array is a fixed-size local C array (a large one, as the records of a
chunk, in scratch memory that the caller passes), every primitive a loop nest over it, the
control flow C's own. The C compiler then sees the whole step at once.

Small arrays are also handled element by element, where that saves work or code (:class:`~livens.engine.native.emitter.Buf`):
data movement only reorders elements, known zeros and ones of differentiation (``jacfwd``'s
seeds, identity and zero blocks) are folded away, small products are written term by term into C
scalars, and only what a loop nest reads is written to an array. Both the kernel's time and the
C compiler's time (which grows with the number of statements and memory accesses) go down.

A large ``jit`` function that the program calls at several places (a scheme's inner solve, as
the projection of the null space method, in the first guess, in Newton's iteration and in the
update) is written once, as a C function of its own called at each place
(:meth:`Translator.plan_shared`), not once per call: a shorter source, compiled sooner.

The translation follows the semantics of each primitive as JAX documents them (``jax.lax``);
operations on values known when the code is generated (constants of the program, index arrays)
are evaluated then, with JAX itself. A primitive this module does not know raises
:class:`Unsupported`, and the caller runs the program with XLA instead. Floating-point results
agree with XLA's to round-off: only the order of summation in reductions and products, and the
order of operations inside LU factorizations, may differ; and a product ``x * 0`` with a known
zero is taken as zero, NaN and infinite x included (:meth:`Translator.simplify`). Where C's
semantics differ from XLA's, the kernel computes XLA's: integer division by zero and the least
value divided by -1 (:func:`~livens.engine.native.elementwise._div`, :func:`~livens.engine.native.elementwise._rem`; C raises
SIGFPE), conversions of NaN and of values out of range to integers
(:func:`~livens.engine.native.elementwise.saturation`), subnormal numbers flushed to zero
(:data:`FLUSH_SUBNORMALS`).

The translator is in several modules: :mod:`~livens.engine.native.emitter` (C types, literals, the
:class:`~livens.engine.native.emitter.Buf` of an array and the statement writer),
:mod:`~livens.engine.native.elementwise` (the C expressions of elementwise primitives),
:mod:`~livens.engine.native.folding` (evaluation on known values), and the rules of the primitives,
one method ``p_<name>`` each, looked up by the primitive's name (:meth:`Translator.eqn`), in
:mod:`~livens.engine.native.movement_rules`, :mod:`~livens.engine.native.algebra_rules` and
:mod:`~livens.engine.native.control_rules`; this module holds the dispatch and :func:`translate`. A
subclass (the lane translator of ensembles) overrides a rule by defining its method again.
"""

from __future__ import annotations

import math

import jax
import numpy as np
from jax.extend import core as jcore

from ..jaxprs import equations, size
from .algebra_rules import AlgebraRules
from .control_rules import ControlRules
from .elementwise import BINARY, UNARY, _integer_pow, _round, _to_integer
from .emitter import MAX_ELEMS, SCALAR_MAX, Buf, Emitter, Unsupported, _ctype, _is_float, _strides, c_literal
from .folding import _np_elementwise, _np_lapack, _np_move
from .last_read import LastRead
from .movement_rules import MovementRules

IDENTITY = {"copy", "copy_p", "optimization_barrier", "stop_gradient"}
CALLS = {
    "pjit",
    "jit",
    "closed_call",
    "core_call",
    "remat",
    "checkpoint",
    "custom_jvp_call",
    "custom_vjp_call",
    "custom_vjp_call_jaxpr",
    "custom_lin",
}
NO_FOLD = {"while", "cond", "scan", "rng_uniform", "random_bits", "random_seed"}
MOVES = {  # primitives that only move elements: operand positions that are data (None: all)
    "transpose": None,
    "reshape": None,
    "squeeze": None,
    "expand_dims": None,
    "broadcast_in_dim": None,
    "slice": None,
    "concatenate": None,
    "rev": None,
    "pad": None,
    "split": None,
    "stack": None,
    "unstack": None,
    "copy": None,
    "copy_p": None,
    "dynamic_slice": (0,),
    "dynamic_update_slice": (0, 1),
    "gather": (0,),
    "select_n": "cases",
}
ZERO_RULES = {"add", "add_any", "sub", "mul"}
COMPARE = {"lt", "le", "gt", "ge", "eq", "ne"}


class Translator(LastRead, MovementRules, AlgebraRules, ControlRules, Emitter):
    """Emits the equations of jaxprs (with their sub-jaxprs) as C statements."""

    UNARY, BINARY = UNARY, BINARY
    linkage = ""
    """What precedes the kernel's declaration (C++ sources: ``extern "C"``)."""

    def header(self) -> str:
        return HEADER

    # --- functions called at several places ---------------------------------------------------
    SHARED_FUNCTIONS = True
    """Write the jaxpr of a ``jit`` call made at several places of the program once, as a C
    function (:meth:`plan_shared`); False: every call inlined."""
    SHARED_MIN_EQUATIONS = 60
    """A called jaxpr of fewer equations (its sub-jaxprs' included) is inlined at each call."""

    def _key(self, closed):
        """What makes two called jaxprs the same function: their text and their constants."""
        if not isinstance(closed, jcore.ClosedJaxpr):
            return None
        hit = self._keys.get(id(closed))
        if hit is None or hit[0] is not closed:
            consts = tuple((np.shape(c), str(np.asarray(c).dtype), np.asarray(c).tobytes()) for c in closed.consts)
            hit = (closed, (str(closed.jaxpr), consts))
            self._keys[id(closed)] = hit
        return hit[1]

    def plan_shared(self, jaxpr) -> None:
        """Find the called jaxprs (``jit``) of ``jaxpr`` that are called at several places (in all
        its sub-jaxprs) and are large (:data:`SHARED_MIN_EQUATIONS`): each becomes one C function,
        called at each place (:meth:`call_shared`). The program is the same; the source is
        shorter, and the C compiler's time with it, where a scheme calls the same inner solve
        several times in a step (the projection of the null space method)."""
        self.shared: dict = {}
        if not self.SHARED_FUNCTIONS:
            return
        counts: dict = {}
        for eqn in equations(jaxpr):
            if eqn.primitive.name in ("pjit", "jit"):
                sub = eqn.params.get("jaxpr")
                if (
                    isinstance(sub, jcore.ClosedJaxpr)
                    and size(sub.jaxpr, self.SHARED_MIN_EQUATIONS) >= self.SHARED_MIN_EQUATIONS
                ):
                    key = self._key(sub)
                    counts[key] = counts.get(key, 0) + 1
        self.shared = {key: None for key, n in counts.items() if n >= 2}

    def call_shared(self, closed, ins: list[Buf]) -> list[Buf]:
        """A call of the C function of ``closed`` (written the first time): arguments as C arrays
        (known values as file-level constants), outputs into new local arrays."""
        key = self._key(closed)
        fname = self.shared[key]
        if fname is None:
            fname = self._write_function(closed)
            self.shared[key] = fname
        args = []
        for b in ins:
            if b.size == 0:
                args.append("0")
            elif b.known:
                args.append(f"({self.ct(b.dtype)} *) {self.static(b)}")
            else:
                args.append(self.arr(b).name)
        outs = [self.new(v.aval.shape, v.aval.dtype) for v in closed.jaxpr.outvars]
        args += [o.name for o in outs]
        self.line(f"{fname}({', '.join(args)});")
        return outs

    def _write_function(self, closed) -> str:
        """The C function of ``closed``: ``static void f(inputs..., outputs...)``, its body
        translated on its own (its own scalars and blocks), kept from inlining so that the C
        compiler works on it once."""
        fname = self.fresh("f")
        saved = (self.lines, self.depth, self.scope, self._scalars, self._main, self._reused, self._frames)
        self.lines, self.depth, self.scope, self._scalars, self._main, self._reused = [], 1, (), {}, False, {}
        self._lu_frames = []  # its arrays its own (LastRead)
        try:
            params, args = [], []
            for k, v in enumerate(closed.jaxpr.invars):
                params.append(f"{self.ct(v.aval.dtype)} *a{k}")
                args.append(Buf(f"a{k}", v.aval.shape, v.aval.dtype))
            outs = self.closed(closed, args)
            for k, (v, b) in enumerate(zip(closed.jaxpr.outvars, outs)):
                params.append(f"{self.ct(v.aval.dtype)} *o{k}")
                if b.size:
                    self.copy(Buf(f"o{k}", b.shape, b.dtype), b)
            body = "\n".join(_flat(self.lines))
        finally:
            self.lines, self.depth, self.scope, self._scalars, self._main, self._reused, self._lu_frames = saved
        self.functions.append(
            f"static __attribute__((noinline)) void {fname}({', '.join(params) or 'void'}) {{\n{body}\n}}"
        )
        return fname

    # --- jaxprs --------------------------------------------------------------------------------
    def jaxpr(self, jaxpr, consts, args) -> list[Buf]:
        """Emit ``jaxpr`` with its constvars bound to ``consts`` and invars to ``args`` (Bufs);
        returns the Bufs of its outvars."""
        env: dict = {}
        for v, b in zip(jaxpr.constvars, consts):
            env[v] = b
        for v, b in zip(jaxpr.invars, args):
            env[v] = b

        def read(v):
            if isinstance(v, jcore.Literal):
                return Buf(None, np.shape(v.val), v.aval.dtype, v.val)
            return env[v]

        self._enter(jaxpr, consts, args)  # where each array is read last (LastRead)
        try:
            for eqn in jaxpr.eqns:
                ins = [read(v) for v in eqn.invars]
                self._at(eqn)
                outs = self.eqn(eqn, ins)
                self._held(eqn, outs)
                for v, b in zip(eqn.outvars, outs):
                    env[v] = b
            return [read(v) for v in jaxpr.outvars]
        finally:
            self._frames.pop()

    def closed(self, cj, args) -> list[Buf]:
        consts = [Buf(None, np.shape(c), np.asarray(c).dtype, np.asarray(c)) for c in cj.consts]
        return self.jaxpr(cj.jaxpr, consts, args)

    REUSE = True
    """An equation the program repeats (the same primitive and parameters on the same arrays) is
    written once: its second occurrence reads the first one's outputs, where those are in scope
    (:meth:`eqn`)."""

    def _reuse_key(self, eqn, ins: list[Buf]):
        """What makes two equations compute the same values: the primitive, its parameters and the
        operands (the same arrays of the program, or the same small known values); None for an
        equation that is never reused (calls and control flow, effects, all operands known)."""
        name = eqn.primitive.name
        if not self.REUSE or eqn.effects or name in CALLS or name in NO_FOLD or all(b.known for b in ins):
            return None
        try:
            params = tuple(sorted(eqn.params.items()))
            hash(params)
        except TypeError:
            return None
        if any(isinstance(v, (jcore.Jaxpr, jcore.ClosedJaxpr)) for _, v in params):
            return None
        operands = []
        for b in ins:
            if b.known:
                if b.size > 16:
                    return None
                operands.append((b.dtype.str, b.shape, b.value.tobytes()))
            else:
                operands.append(id(b))
        return (name, params, tuple(operands))

    def eqn(self, eqn, ins: list[Buf]) -> list[Buf]:
        """The outputs of one equation: those of the same equation written before, where its code is
        in the current block or one that encloses it (every array is written whole before it is read
        and not after, but loop carries, which change only at the end of their loop's body, after
        every equation of the body: the values are the same, :meth:`scalar`'s argument), else its rule's.
        A Newton loop's condition and body both take the norm of the residual it carries: the body
        reads the condition's (:meth:`_while`)."""
        key = self._reuse_key(eqn, ins)
        if key is not None:
            hit = self._reused.get(key)
            if hit is not None and self.scope[: len(hit[0])] == hit[0]:
                return hit[2]
        outs = self._rule(eqn, ins)
        if key is not None:
            self._reused[key] = (self.scope, ins, outs)  # the operands held: their ids stay theirs
        return outs

    def _rule(self, eqn, ins: list[Buf]) -> list[Buf]:
        name = eqn.primitive.name
        p = eqn.params
        outs_aval = [v.aval for v in eqn.outvars]
        if (
            name in ("pjit", "jit")
            and self.shared
            and not all(b.known for b in ins)
            and self._key(p.get("jaxpr")) in self.shared
        ):
            return self.call_shared(p["jaxpr"], ins)
        if name in CALLS:
            sub = p.get("jaxpr", p.get("call_jaxpr", p.get("fun_jaxpr")))
            if sub is None:
                raise Unsupported(f"{name} without a jaxpr")
            if isinstance(sub, jcore.ClosedJaxpr):
                return self.closed(sub, ins)
            return self.jaxpr(sub, [], ins)
        if all(b.known for b in ins) and name not in NO_FOLD and not eqn.effects:
            return self.fold(eqn, ins)
        if name in MOVES:
            moved = self.move(eqn, ins)
            if moved is not None:
                return moved
        method = getattr(self, "p_" + name.replace("-", "_"), None)
        if method is not None:
            out = method(ins, outs_aval, **p)
            return out if isinstance(out, list) else [out]
        if name in self.UNARY:
            if ins[0].elems is not None and not p:
                return [self.elementwise_elems(name, self.UNARY[name], ins, outs_aval[0])]
            return [self.elementwise(self.UNARY[name], ins, outs_aval[0], p)]
        if name in COMPARE:
            decided = self.decided_compare(name, ins, outs_aval[0])
            if decided is not None:
                return [decided]
        if name in self.BINARY:
            simple = self.simplify(name, ins, outs_aval[0])
            if simple is not None:
                return [simple]
            if any(b.elems is not None for b in ins) or (
                name in ZERO_RULES
                and math.prod(outs_aval[0].shape) <= MAX_ELEMS
                and any(b.known and b.size > 1 and bool(np.any(b.value == 0)) for b in ins)
            ):
                return [self.elementwise_elems(name, self.BINARY[name], ins, outs_aval[0])]
            return [self.elementwise(self.BINARY[name], ins, outs_aval[0], p)]
        if name in IDENTITY:
            return [self.alias(b, a.shape) for b, a in zip(ins, outs_aval)]
        raise Unsupported(f"primitive {name!r}")

    def fold(self, eqn, ins) -> list[Buf]:
        """Evaluate an equation on known values now: by NumPy where its result is JAX's
        (:mod:`~livens.engine.native.folding`), an LU by JAX's own LAPACK routine, else with JAX on
        the CPU (which compiles an XLA program for each new shape)."""
        vals = [b.value for b in ins]
        with np.errstate(all="ignore"):
            outs = _np_move(eqn.primitive.name, vals, eqn.params)
            if outs is None:
                outs = _np_elementwise(eqn.primitive.name, vals, eqn.params)
            if outs is None:
                outs = _np_lapack(eqn.primitive.name, vals, eqn.params)
        if outs is not None:
            return [Buf(None, v.aval.shape, v.aval.dtype, np.asarray(o)) for v, o in zip(eqn.outvars, outs)]
        try:
            with jax.ensure_compile_time_eval():
                out = eqn.primitive.bind(*vals, **eqn.params)
        except Exception as exc:  # pragma: no cover - a primitive that cannot run eagerly
            raise Unsupported(f"cannot evaluate {eqn.primitive.name} on constants: {exc}") from None
        outs = out if eqn.primitive.multiple_results else [out]
        return [Buf(None, v.aval.shape, v.aval.dtype, np.asarray(o)) for v, o in zip(eqn.outvars, outs)]

    # --- data movement as elements ----------------------------------------------------------------
    def move(self, eqn, ins) -> list[Buf] | None:
        """A primitive that only moves elements (:data:`MOVES`), evaluated now on the codes of the
        elements (with the primitive itself, so with its own semantics): the outputs are Bufs of
        the operands' elements. None where an output is large or an index is not known now."""
        data = MOVES[eqn.primitive.name]
        if data is None:
            data = range(len(ins))
        elif data == "cases":
            data = range(1, len(ins))
        if any(not ins[k].known for k in range(len(ins)) if k not in data):
            return None
        if sum(math.prod(v.aval.shape) for v in eqn.outvars) > MAX_ELEMS:
            return None
        if any(ins[k].elems is None and not ins[k].known and ins[k].size > MAX_ELEMS for k in data):
            return None
        vals, pool, base = [], [], 1  # code 0: an element no operand gives (out-of-bounds fill)
        for k, b in enumerate(ins):
            if k in data:
                vals.append((base + np.arange(b.size, dtype=np.int64)).reshape(b.shape))
                pool.extend(self.atoms(b))
                base += b.size
            else:
                vals.append(b.value)
        outs = _np_move(eqn.primitive.name, vals, eqn.params)
        if outs is None:
            params = dict(eqn.params)
            if eqn.primitive.name == "gather":
                params["fill_value"] = 0
            try:
                with jax.ensure_compile_time_eval():
                    out = eqn.primitive.bind(*vals, **params)
            except Exception:  # noqa: BLE001 - leave it to the primitive's own translation
                return None
            outs = out if eqn.primitive.multiple_results else [out]
        res = []
        for v, o in zip(eqn.outvars, outs):
            codes = np.asarray(o).ravel()
            if codes.size and codes.min() <= 0:
                return None
            res.append(self.make(v.aval.shape, v.aval.dtype, [pool[c - 1] for c in codes.tolist()]))
        return res

    def elementwise_elems(self, name, fn, ins, aval) -> Buf:
        """An elementwise operation element by element, on operands of which one is a Buf of
        elements or known with zeros: ``x + 0``, ``x - 0``, ``x * 1`` are x's element, ``x * 0`` a
        known zero (:meth:`simplify`), the others computed, by runs of loops where they line up."""
        shape = tuple(aval.shape)
        n = int(math.prod(shape))
        cols = []
        for b in ins:
            if b.size == 1:
                at = self.atoms(b)
                cols.append([at[0]] * n)
                continue
            if len(b.shape) != len(shape):
                raise Unsupported(f"elementwise operands of shapes {b.shape} and {shape}")
            where = np.broadcast_to(np.arange(b.size).reshape(b.shape), shape).ravel().tolist()
            at = self.atoms(b)
            cols.append([at[w] for w in where])
        dt = ins[0].dtype
        dts = tuple(b.dtype for b in ins)  # for the literals of each operand
        result, ks, ops = [], [], []
        for k in range(n):
            args = tuple(c[k] for c in cols)
            r = self._simple_atom(name, args, aval.dtype)
            if r is None:
                ks.append(k)
                ops.append(args)
            result.append(r)
        # an element of a C scalar operand in a C scalar itself (no run of a loop can read it),
        # the others into an array, by runs
        if n > SCALAR_MAX:
            arrayed = list(zip(ks, ops))
        else:
            arrayed = [(k, a) for k, a in zip(ks, ops) if all(x[0] is None or x[1] is not None for x in a)]
            for k, a in zip(ks, ops):
                if not all(x[0] is None or x[1] is not None for x in a):
                    result[k] = self.scalar(fn(*[self.text(x, d) for x, d in zip(a, dts)], dt), aval.dtype)
        if arrayed:
            out = self.new(shape, aval.dtype)
            self.assign(
                out.name, [k for k, _ in arrayed], lambda *t: fn(*t, dt), [a for _, a in arrayed], dts, aval.dtype
            )
            for k, _ in arrayed:
                result[k] = (out.name, k)
        return self.make(shape, aval.dtype, result)

    @staticmethod
    def _simple_atom(name, args, dtype):
        """The element of ``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x`` (x), ``x * 0`` (0),
        ``-c`` (-c) for known scalars; None where it must be computed."""
        if not _is_float(dtype):
            return None
        if name == "neg":
            a = args[0]
            return (None, -a[1]) if a[0] is None else None
        if len(args) != 2:
            return None
        (an, av), (bn, bv) = args
        if name in ("add", "add_any"):
            if bn is None and bv == 0:
                return args[0]
            if an is None and av == 0:
                return args[1]
        elif name == "sub":
            if bn is None and bv == 0:
                return args[0]
        elif name == "mul":
            if (an is None and av == 0) or (bn is None and bv == 0):
                return (None, 0.0)
            if bn is None and bv == 1:
                return args[0]
            if an is None and av == 1:
                return args[1]
        return None

    def decided_compare(self, name, ins, aval) -> Buf | None:
        """A comparison of integers that their bounds decide (:meth:`~livens.engine.native.emitter.Emitter.bounds`),
        as the known result: ``perm < 0`` of an LU's permutation, with which ``jnp.take`` wraps
        negative indices, is false everywhere (the select of the wrapped index folds away, and the
        gather's clamp of :meth:`p_gather` with it). None where the bounds do not decide it."""
        if len(ins) != 2:
            return None
        a, b = (self.bounds(x) for x in ins)
        if a is None or b is None:
            return None
        (alo, ahi), (blo, bhi) = a, b
        if name in ("gt", "ge"):  # b < a, b <= a
            name, (alo, ahi), (blo, bhi) = ("lt" if name == "gt" else "le"), (blo, bhi), (alo, ahi)
        if name == "lt":
            value = True if ahi < blo else (False if alo >= bhi else None)
        elif name == "le":
            value = True if ahi <= blo else (False if alo > bhi else None)
        else:  # eq, ne: decided where the ranges are apart
            value = None if (ahi >= blo and bhi >= alo) else (name == "ne")
        if value is None:
            return None
        return Buf(None, aval.shape, aval.dtype, np.full(aval.shape, value, dtype=aval.dtype))

    # --- algebraic simplification ---------------------------------------------------------------
    @staticmethod
    def _all(b: Buf, x) -> bool:
        return b.known and b.size > 0 and bool(np.all(b.value == x))

    def simplify(self, name, ins, aval) -> Buf | None:
        """``x + 0``, ``0 + x``, ``x - 0`` and ``x * 1`` as ``x`` itself, ``x * 0`` as a known zero.

        Differentiation (``jacfwd`` seeds, ``add_any`` of symbolic zeros made concrete, identity
        blocks of tangents) leaves many such operations on operands known now. Folding ``x * 0`` to
        zero ignores that it is NaN where x is infinite or NaN, where XLA computes the product: a
        NaN that reaches the program's outputs only through such a product (``0.0 * log(x)`` of a
        negative x) is lost natively. ``x + 0`` differs from x only in the sign of a zero x."""
        if len(ins) != 2 or not _is_float(aval.dtype):
            return None
        a, b = ins
        shape = tuple(aval.shape)

        def same(x: Buf) -> Buf | None:
            return self.alias(x, shape) if x.shape == shape else None

        if name in ("add", "add_any"):
            if self._all(b, 0):
                return same(a)
            if self._all(a, 0):
                return same(b)
        elif name == "sub" and self._all(b, 0):
            return same(a)
        elif name == "mul":
            if self._all(a, 0) or self._all(b, 0):
                return Buf(None, shape, aval.dtype, np.zeros(shape, aval.dtype))
            if self._all(b, 1):
                return same(a)
            if self._all(a, 1):
                return same(b)
        return None

    # --- elementwise -----------------------------------------------------------------------------
    def elementwise(self, fn, ins, aval, params) -> Buf:
        out = self.new(aval.shape, aval.dtype)
        dt = ins[0].dtype
        extra = {k: v for k, v in params.items() if k in ("y", "rounding_method")}
        n = out.size
        if any(
            b.size not in (1, n)
            or (
                b.size == n
                and b.shape != out.shape
                and len(b.shape) == len(out.shape)
                and b.size > 1
                and any(x != y for x, y in zip(b.shape, out.shape))
            )
            for b in ins
        ):
            # operands of the output's rank with axes of length 1 (lax broadcasts those)
            idx = self.loops(out.shape)
            args = []
            for b in ins:
                if b.size == 1:
                    args.append(self.at(b, 0))
                    continue
                if len(b.shape) != len(out.shape):
                    raise Unsupported(f"elementwise operands of shapes {b.shape} and {out.shape}")
                st = _strides(b.shape)
                args.append(self.at(b, self.affine([(s, i) for s, i, k in zip(st, idx, b.shape) if k != 1])))
            self.line(f"{out.name}[{self.flat(idx, out.shape)}] = {self.rhs(fn(*args, dt, **extra), out.dtype)};")
            self.end(idx)
            return out

        def expr(i):
            args = [self.at(b, 0 if b.size == 1 else i) for b in ins]
            return fn(*args, dt, **extra)

        if n == 1:
            self.line(f"{out.name}[0] = {self.rhs(expr(0), out.dtype)};")
        else:
            i = self.fresh("i")
            self.open(f"for (int {i} = 0; {i} < {n}; {i}++)")
            self.line(f"{out.name}[{i}] = {self.rhs(expr(i), out.dtype)};")
            self.close()
        return out

    def p_integer_pow(self, ins, outs, y, **_):
        return self.elementwise(_integer_pow, ins, outs[0], {"y": y})

    def p_round(self, ins, outs, rounding_method=0, **_):
        return self.elementwise(_round, ins, outs[0], {"rounding_method": int(rounding_method)})

    def p_convert_element_type(self, ins, outs, new_dtype, **_):
        src = ins[0]
        if np.dtype(new_dtype) == src.dtype:
            return self.alias(src, outs[0].shape)
        ct = _ctype(new_dtype)
        if np.dtype(new_dtype) == np.bool_:
            return self.elementwise(lambda a, dt: f"({a} != 0)", ins, outs[0], {})
        if _is_float(src.dtype) and not _is_float(new_dtype):
            return self.elementwise(_to_integer(np.dtype(new_dtype)), ins, outs[0], {})
        return self.elementwise(lambda a, dt: f"(({ct}) {a})", ins, outs[0], {})

    def p_select_n(self, ins, outs, **_):
        pred, cases = ins[0], ins[1:]

        def fn(*args):
            c, vals = args[0], args[1:-1]
            if pred.dtype == np.bool_ or len(vals) == 2:
                return f"({c} ? {vals[1]} : {vals[0]})"
            e = vals[-1]
            for k in range(len(vals) - 2, -1, -1):
                e = f"({c} == {k} ? {vals[k]} : {e})"
            return e

        if self._branch_select(pred, cases):
            return self._select_branches(pred, cases, outs[0])
        if any(b.elems is not None for b in ins):
            return self.elementwise_elems("select_n", fn, [pred, *cases], outs[0])
        return self.elementwise(fn, [pred, *cases], outs[0], {})

    SELECT_BRANCH = 8
    """A choice between two arrays of at least this many elements by one predicate known only when
    the kernel runs is written as ``if``/``else`` of two copies (:meth:`_select_branches`)."""

    def _branch_select(self, pred: Buf, cases) -> bool:
        """Whether :meth:`p_select_n` writes this choice as two branches: one C scalar predicate
        (not a lane kernel's vector), two cases, of at least :data:`SELECT_BRANCH` elements with
        none of them a C scalar (whose choice stays an expression of C scalars)."""
        if pred.size != 1 or pred.known or len(cases) != 2 or cases[0].size < self.SELECT_BRANCH:
            return False
        if self.ct(pred.dtype) != _ctype(pred.dtype):
            return False
        return not any(b.elems is not None and any(a[1] is None for a in b.elems) for b in cases)

    def _select_branches(self, pred: Buf, cases, aval) -> Buf:
        """``out = pred ? cases[1] : cases[0]`` as ``if (pred) copy case 1 else copy case 0``: the
        same elements, without a select per element in a loop (GCC keeps the predicate's test in
        the loop at ``-O2``, and a run whose cases step differently is not vectorized). A step's
        acceptance choosing between its new state and the old one, a history shifted or kept."""
        out = self.new(aval.shape, aval.dtype)
        self.open(f"if ({self.at(pred, 0)})")
        self.copy(out, cases[1])
        self.close()
        self.open("else")
        self.copy(out, cases[0])
        self.close()
        return out

    def p_clamp(self, ins, outs, **_):
        def fn(lo, x, hi, dt):
            return f"({x} < {lo} ? {lo} : ({x} > {hi} ? {hi} : {x}))"

        return self.elementwise(fn, ins, outs[0], {})

    def p_reduce_precision(self, ins, outs, exponent_bits, mantissa_bits, **_):
        if ins[0].dtype == np.float64 and (exponent_bits, mantissa_bits) == (11, 52):
            return self.alias(ins[0], outs[0].shape)
        raise Unsupported("reduce_precision")

    def p_iota(self, ins, outs, dtype, shape, dimension, **_):
        out = self.new(shape, dtype)
        idx = self.loops(shape)
        self.line(f"{out.name}[{self.flat(idx, shape)}] = {self.rhs(idx[dimension], dtype)};")
        self.end(idx)
        return out


HEADER = """#include <math.h>
#include <stdint.h>
#include <string.h>
"""


FLUSH_SUBNORMALS = """#if defined(__x86_64__) || defined(__i386__)
#define LV_FLUSH_ON unsigned int lv_csr = __builtin_ia32_stmxcsr(); __builtin_ia32_ldmxcsr(lv_csr | 0x8040u);
#define LV_FLUSH_OFF __builtin_ia32_ldmxcsr(lv_csr);
#else
#define LV_FLUSH_ON
#define LV_FLUSH_OFF
#endif
"""
"""The kernel computes as XLA does on the CPU: subnormal operands read as zero and subnormal
results flushed to zero (the SSE control bits DAZ and FTZ, set for the call and restored after
it, where the CPU is x86). The compiler's builtins read and write the control register, which
``_mm_getcsr`` and ``_mm_setcsr`` are: without ``<xmmintrin.h>``, whose thousands of lines every
compile would read."""


def _flat(lines):
    """The lines of a function body (nested lists: the places where values were made)."""
    for x in lines:
        if isinstance(x, list):
            yield from _flat(x)
        else:
            yield x


def _dce(jaxpr):
    """The jaxpr without the equations no output depends on (those of the sub-jaxprs of loops and
    conditionals too, by JAX's own rules: ``partial_eval.dce_jaxpr``), its constvars first among
    its invars; and which of those invars it still reads. Differentiation leaves such equations
    (the primal outputs of a ``jvp`` that only its tangent is read of); the C compiler would
    remove them too, but only after spending its time on them."""
    from jax._src.interpreters import partial_eval as pe

    full = pe.convert_constvars_jaxpr(jaxpr)
    try:
        live, used = pe.dce_jaxpr(full, [True] * len(full.outvars), instantiate=True)
    except Exception:  # noqa: BLE001 - an equation without a DCE rule: translate it all
        return full, [True] * len(full.invars)
    return live, used


def translate(closed_jaxpr, name: str = "livens_kernel", translator: "Translator | None" = None) -> str:
    """C source of ``void name(void **args)``: args are the flat inputs of the closed jaxpr, then
    its flat outputs, each a pointer to a C-contiguous array of the aval's shape and dtype, then,
    where ``translator.scratch`` (after the call) is not 0, a pointer to that many bytes of
    scratch memory aligned to 64 bytes (the large arrays: :meth:`Emitter.new`), then, where
    ``translator.interruptible``, a pointer to the stop flag (an ``int``; :attr:`Translator.interruptible`).

    ``translator``: a :class:`Translator` (default a new one); a
    :class:`~livens.engine.native.member_lanes.LaneTranslator` gives C++ source of the same function
    run on several members at once, one per lane of a vector (each array then has a last axis of
    the lanes)."""
    t = Translator() if translator is None else translator
    jaxpr = closed_jaxpr.jaxpr
    n_in = len(jaxpr.invars)
    args = []
    for k, v in enumerate(jaxpr.invars):
        ct = t.ct(v.aval.dtype)
        nm = f"in{k}"
        t.line(f"{ct} *{nm} = ({ct} *) args[{k}];")
        args.append(Buf(nm, v.aval.shape, v.aval.dtype))
    consts = [Buf(None, np.shape(c), np.asarray(c).dtype, np.asarray(c)) for c in closed_jaxpr.consts]
    live, used = _dce(jaxpr)
    t.plan_shared(live)
    outs = t.jaxpr(live, [], [b for b, u in zip(consts + args, used) if u])
    for k, (_, b) in enumerate(zip(jaxpr.outvars, outs)):
        ct = t.ct(b.dtype)
        dst = Buf(f"out{k}", b.shape, b.dtype)
        t.line(f"{ct} *out{k} = ({ct} *) args[{n_in + k}];")
        if b.rows_written is not None and b.elems is None and not b.known and b.name != dst.name:
            done, per_row = b.rows_written  # the rows an interruptible scan wrote before it stopped
            t.line(f"memcpy(out{k}, {b.name}, sizeof(out{k}[0]) * {per_row} * (size_t) {done});")
        elif b.size:
            t.copy(dst, b)
    body = "\n".join(_flat(t.lines))
    n_args = n_in + len(jaxpr.outvars)
    scratch = f"(char *) args[{n_args}]" if t.scratch else "(char *) 0"
    stop = f"(volatile int *) args[{n_args + bool(t.scratch)}]" if t.interruptible else "&lv_never"
    return (
        t.header()
        + FLUSH_SUBNORMALS
        + "\n".join(t.statics)
        + "\n\n"
        + "".join(f + "\n\n" for f in t.functions)
        + "static volatile int lv_never = 0;\n"
        + f"static void {name}_body(void **args, char *lv_scratch, volatile int *lv_stop) {{\n{body}\n}}\n\n"
        + f"{t.linkage}void {name}(void **args) {{\n  LV_FLUSH_ON\n  {name}_body(args, {scratch}, {stop});\n  LV_FLUSH_OFF\n}}\n"
    )


__all__ = ["Unsupported", "translate", "c_literal"]
