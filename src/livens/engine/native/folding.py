"""Constant folding for :mod:`livens.engine.native.codegen`: the data-movement and elementwise
primitives evaluated with NumPy on values known when the code is written (index tables of
gathers and scatters, known zeros and ones of derivatives), as ``jax.lax`` defines them."""

from __future__ import annotations

import ctypes
import math
from types import SimpleNamespace

import numpy as np

from ...numpy_jaxpr import BINARY
from .emitter import _is_float


def _np_move(name, vals, p):
    """The common data-movement primitives on NumPy arrays, as ``jax.lax`` defines them (the
    others, and any parameter not handled here: None, for the primitive itself). JAX would compile
    an XLA program for each new shape, which is most of the time of translating otherwise."""
    try:
        if name in ("reshape", "squeeze", "expand_dims"):
            if name == "reshape" and p.get("dimensions") is not None:
                return None
            return [vals[0].reshape(p["new_sizes"] if name == "reshape" else _squeezed(vals[0].shape, name, p))]
        if name == "transpose":
            return [vals[0].transpose(p["permutation"])]
        if name == "broadcast_in_dim":
            x, shape, dims = vals[0], tuple(p["shape"]), tuple(p["broadcast_dimensions"])
            mid = [1] * len(shape)
            for k, d in enumerate(dims):
                mid[d] = x.shape[k]
            return [np.broadcast_to(x.reshape(mid), shape)]
        if name == "slice":
            steps = p.get("strides") or (1,) * vals[0].ndim
            return [vals[0][tuple(slice(a, b, c) for a, b, c in zip(p["start_indices"], p["limit_indices"], steps))]]
        if name == "concatenate":
            return [np.concatenate(vals, axis=p["dimension"])]
        if name == "rev":
            return [np.flip(vals[0], axis=tuple(p["dimensions"])) if p["dimensions"] else vals[0]]
        if name == "split":
            cuts = np.cumsum(p["sizes"])[:-1]
            return np.split(vals[0], cuts, axis=p["axis"])
        if name in ("copy", "copy_p"):
            return [vals[0]]
        if name == "stack":
            return [np.stack(vals, axis=p["axis"])]
        if name == "unstack":
            return [np.take(vals[0], k, axis=p["axis"]) for k in range(vals[0].shape[p["axis"]])]
        if name == "pad":
            return [_np_pad(vals[0], vals[1], p["padding_config"])]
        if name == "select_n":  # a choice among the cases' elements: a move of them
            return _np_elementwise(name, vals, p)
        if name == "gather":
            out = _np_gather(vals[0], np.asarray(vals[1]), p["dimension_numbers"], p["slice_sizes"], p["mode"])
            return None if out is None else [out]
    except (KeyError, TypeError, ValueError):
        return None
    return None


def _window_offset(starts, idx, strides) -> str:
    """C expression of the flat operand index of window element ``idx`` (C index names) of a
    window starting at ``starts`` (C expressions), in an operand of ``strides``."""
    return " + ".join(f"({a} + {i})*{k}" for a, i, k in zip(starts, idx, strides)) or "0"


def _np_pad(x, value, config):
    """``jax.lax.pad``: per axis (low, high, interior), ``interior`` copies of ``value`` between
    neighbours, then ``low`` / ``high`` of them at the ends (negative: that many cut off)."""
    x = np.asarray(x)
    value = np.asarray(value, x.dtype)
    dilated = [n + max(n - 1, 0) * k for n, (_, _, k) in zip(x.shape, config)]
    inner = np.full(dilated, value, x.dtype)
    inner[tuple(slice(None, None, k + 1) for _, _, k in config)] = x
    shape = [lo + n + hi for n, (lo, hi, _) in zip(dilated, config)]
    if any(n < 0 for n in shape):
        raise ValueError("pad: negative size")
    out = np.full(shape, value, x.dtype)
    src, dst = [], []
    for n, m, (lo, _, _) in zip(dilated, shape, config):
        a, b = max(lo, 0), min(lo + n, m)  # where the dilated operand lands in the output
        src.append(slice(a - lo, b - lo) if b > a else slice(0, 0))
        dst.append(slice(a, b) if b > a else slice(0, 0))
    out[tuple(dst)] = inner[tuple(src)]
    return out


def _np_gather(operand, indices, dn, slice_sizes, mode):
    """``jax.lax.gather`` (its index vector the last axis of the indices, as JAX always has it):
    the window of ``slice_sizes`` at each index vector's start, starts clamped into the operand
    (modes clip and promise-in-bounds); None for batching dimensions, and for a window out of
    bounds in fill mode."""
    if getattr(dn, "operand_batching_dims", ()) or indices.ndim == 0:
        return None
    fill = "FILL" in str(mode)
    batch_shape = indices.shape[:-1]
    rows = indices.reshape(math.prod(batch_shape), indices.shape[-1]).tolist()  # index vectors of any length, 0 too
    wshape = [n for d, n in enumerate(slice_sizes) if d not in dn.collapsed_slice_dims]
    windows = []
    for row in rows:
        start = [0] * operand.ndim
        for k, d in enumerate(dn.start_index_map):
            start[d] = int(row[k])
        for d in range(operand.ndim):
            hi = operand.shape[d] - slice_sizes[d]
            if fill and not 0 <= start[d] <= hi:
                return None
            start[d] = min(max(start[d], 0), hi)
        windows.append(operand[tuple(slice(a, a + n) for a, n in zip(start, slice_sizes))].reshape(wshape))
    w = (
        np.stack(windows).reshape(tuple(batch_shape) + tuple(wshape))
        if windows
        else np.zeros(tuple(batch_shape) + tuple(wshape), operand.dtype)
    )
    rank = len(batch_shape) + len(wshape)
    src = [0] * rank
    for i, t in enumerate(a for a in range(rank) if a not in dn.offset_dims):
        src[t] = i
    for j, t in enumerate(dn.offset_dims):
        src[t] = len(batch_shape) + j
    return w.transpose(src)


_NP_BINARY = {
    name: BINARY[name] for name in ("add", "add_any", "sub", "mul", "eq", "ne", "lt", "le", "gt", "ge", "and", "or")
}


_NP_REDUCE = {
    "reduce_sum": np.sum,
    "reduce_max": np.max,
    "reduce_min": np.min,
    "reduce_and": np.all,
    "reduce_or": np.any,
}
"""Reductions folded by NumPy where the operand is integer or boolean (no round-off, so any order)."""


def _np_elementwise(name, vals, p):
    """Common elementwise primitives (and ``dot_general``) on known NumPy arrays, where NumPy's
    result is the one ``jax.lax`` defines (IEEE arithmetic, comparisons, exact conversions; a
    product to round-off); None for the others, which run through JAX (which compiles an XLA
    program for each new shape)."""
    if name in _NP_BINARY and all(np.asarray(v).dtype == np.asarray(vals[0]).dtype for v in vals):
        return [_NP_BINARY[name](*vals)]
    if name == "div" and _is_float(np.asarray(vals[0]).dtype):
        return [np.divide(*vals)]
    if name == "neg":
        return [np.negative(vals[0])]
    if name == "not":
        return [np.logical_not(vals[0]) if vals[0].dtype == np.bool_ else np.invert(vals[0])]
    if name == "convert_element_type":
        src, dst = np.asarray(vals[0]).dtype, np.dtype(p["new_dtype"])
        if _is_float(dst) or (not _is_float(src) and dst != np.bool_):
            return [np.asarray(vals[0]).astype(dst)]
        if dst == np.bool_:
            return [np.asarray(vals[0]) != 0]
        return None
    if name in _NP_REDUCE and not _is_float(np.asarray(vals[0]).dtype):  # exact: integers, booleans
        return [_NP_REDUCE[name](np.asarray(vals[0]), axis=tuple(p["axes"])).astype(np.asarray(vals[0]).dtype)]
    if name == "select_n":
        pred, cases = np.asarray(vals[0]), vals[1:]
        if pred.dtype == np.bool_:
            return [np.where(pred, cases[1], cases[0])] if len(cases) == 2 else [np.asarray(cases[0])]
        return [np.choose(pred, np.broadcast_arrays(*cases))]
    if (
        name == "dot_general"
        and all(_is_float(np.asarray(v).dtype) for v in vals)
        and np.asarray(vals[0]).dtype == np.asarray(vals[1]).dtype
    ):
        # summed term by term in the contraction's order, as the loop nest of p_dot_general does
        (lc, rc), (lb, rb) = p["dimension_numbers"]
        lhs, rhs = np.asarray(vals[0]), np.asarray(vals[1])
        lfree = [i for i in range(lhs.ndim) if i not in lc and i not in lb]
        rfree = [i for i in range(rhs.ndim) if i not in rc and i not in rb]
        nb = int(math.prod(lhs.shape[a] for a in lb))
        nc = int(math.prod(lhs.shape[a] for a in lc))
        nl = int(math.prod(lhs.shape[a] for a in lfree))
        nr = int(math.prod(rhs.shape[a] for a in rfree))
        lm = lhs.transpose(list(lb) + lfree + list(lc)).reshape(nb, nl, nc)  # sizes given: some may be 0
        rm = rhs.transpose(list(rb) + rfree + list(rc)).reshape(nb, nr, nc)
        acc = np.zeros((nb, lm.shape[1], rm.shape[1]), lhs.dtype)
        for c in range(nc):
            acc += lm[:, :, None, c] * rm[:, None, :, c]
        shape = [lhs.shape[a] for a in lb] + [lhs.shape[a] for a in lfree] + [rhs.shape[a] for a in rfree]
        return [acc.reshape(shape)]
    if name == "iota":
        shape, dim = tuple(p["shape"]), p["dimension"]
        ar = np.arange(shape[dim], dtype=np.dtype(p["dtype"]))
        return [np.broadcast_to(ar.reshape([-1 if k == dim else 1 for k in range(len(shape))]), shape)]
    return _np_exact(name, vals, p)


_IDENTITY = ("stop_gradient", "copy", "copy_p", "optimization_barrier")


def _np_exact(name, vals, p):
    """The floating-point primitives whose result on these known values is one IEEE value, whatever
    the order XLA computes them in: the identities, ``abs``, ``is_finite``, a maximum or minimum
    without NaN or zeros of both signs (of an array's elements, or of two arrays without a NaN and
    without zeros of both signs in one place), a sum whose every partial sum is exact (at most one element not zero in
    each sum, or integers of a small total) and without a negative zero, and the LU factorization
    of 1 x 1 matrices (the matrix, pivot 0, permutation 0), the QR factorization of an empty matrix
    (no reflection: the identity's columns, an empty R), a ``scatter-add`` whose every target
    sums at most one element not zero, without a negative zero (:func:`_np_scatter_add`). None for
    the others (JAX computes them, compiling an XLA program for each new shape)."""
    if name in _IDENTITY:
        return [np.asarray(v) for v in vals]
    if not vals:  # a primitive without operands: none of the above
        return None
    x = np.asarray(vals[0])
    if name == "scatter-add" and len(vals) == 3:
        return _np_scatter_add(x, np.asarray(vals[1]), np.asarray(vals[2]), p)
    if not _is_float(x.dtype) or x.dtype.itemsize < 4:
        return None
    if name == "abs":
        return [np.abs(x)]
    if name == "is_finite":
        return [np.isfinite(x)]
    if name in ("max", "min") and len(vals) == 2:
        y = np.asarray(vals[1])
        if y.dtype != x.dtype or np.isnan(x).any() or np.isnan(y).any():
            return None
        if ((x == 0) & (y == 0) & (np.signbit(x) != np.signbit(y))).any():
            return None  # a NaN, or zeros of both signs in one place: XLA's choice
        return [(np.maximum if name == "max" else np.minimum)(x, y)]
    if name in ("reduce_max", "reduce_min") and x.size:
        zero = x == 0
        if np.isnan(x).any() or (np.signbit(x[zero]).any() and not np.signbit(x[zero]).all()):
            return None
        return [_NP_REDUCE[name](x, axis=tuple(p["axes"]))]
    if name == "reduce_sum":
        axes = tuple(p["axes"])
        negative_zero = np.signbit(x) & (x == 0)
        if not np.isfinite(x).all() or negative_zero.any():
            return None
        one_term = np.count_nonzero(x, axis=axes).max(initial=0) <= 1
        small_integers = np.all(x == np.round(x)) and float(np.abs(x).sum()) < 2.0 ** np.finfo(x.dtype).nmant
        if one_term or small_integers:
            return [np.sum(x, axis=axes).astype(x.dtype)]
        return None
    if name == "lu" and x.ndim >= 2 and x.shape[-2:] == (1, 1):
        index = np.zeros(x.shape[:-1], np.int32)
        return [x, index, index.copy()]
    if name == "qr" and x.ndim >= 2 and x.size == 0 and not p.get("pivoting", False):
        m, n = x.shape[-2:]  # no columns (or rows) to reflect: Q is the identity's first k columns
        k = m if p.get("full_matrices", True) else min(m, n)
        q = np.broadcast_to(np.eye(m, k, dtype=x.dtype), x.shape[:-2] + (m, k))
        return [q.copy(), np.zeros(x.shape[:-2] + (k, n), x.dtype)]
    return None


def _np_scatter_targets(shape, indices, dn, upd_shape, mode):
    """The flat operand index that each element of a scatter's updates (in their order) goes to,
    for an operand of ``shape`` and the scatter's ``indices``, dimension numbers ``dn`` and
    ``mode`` (``jax.lax.scatter``: the targets are the sources of the gather of the same windows;
    clamped into the operand in clip mode); None for batching dimensions and for a window out of
    bounds in the other modes (XLA drops those updates)."""
    if getattr(dn, "operand_batching_dims", ()):
        return None
    if len(dn.update_window_dims) != len(shape) - len(dn.inserted_window_dims):
        return None
    window, slice_sizes = iter(dn.update_window_dims), []
    for d in range(len(shape)):
        slice_sizes.append(1 if d in dn.inserted_window_dims else upd_shape[next(window)])
    gdn = SimpleNamespace(
        offset_dims=tuple(dn.update_window_dims),
        collapsed_slice_dims=tuple(dn.inserted_window_dims),
        start_index_map=tuple(dn.scatter_dims_to_operand_dims),
    )
    codes = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    table = _np_gather(codes, indices, gdn, tuple(slice_sizes), "CLIP" if "CLIP" in str(mode) else "FILL")
    if table is None or np.asarray(table).size != math.prod(upd_shape):
        return None
    return np.asarray(table).ravel()


def _np_scatter_add(operand, indices, updates, p):
    """``scatter-add`` on known values where its result is one IEEE value whatever the order of the
    additions: every target sums at most one element not zero (its operand element and the
    updates it receives), all finite, none a negative zero (integers: any sum, wrapping as XLA's;
    floats of at least 32 bits); None otherwise, and where :func:`_np_scatter_targets` gives no targets."""
    if (
        updates.dtype != operand.dtype
        or operand.dtype == np.bool_
        or (_is_float(operand.dtype) and operand.dtype.itemsize < 4)
    ):
        return None
    table = _np_scatter_targets(operand.shape, indices, p["dimension_numbers"], updates.shape, p.get("mode"))
    if table is None:
        return None
    flat, upd = operand.ravel().copy(), updates.ravel()
    if _is_float(operand.dtype):
        terms = np.concatenate([flat, upd])
        if not np.isfinite(terms).all() or (np.signbit(terms) & (terms == 0)).any():
            return None
        count = np.zeros(flat.size, np.int64)
        np.add.at(count, np.arange(flat.size), flat != 0)
        np.add.at(count, table, upd != 0)
        if count.max(initial=0) > 1:
            return None
    with np.errstate(all="ignore"):
        np.add.at(flat, table, upd)
    return [flat.reshape(operand.shape)]


def _scipy_function(module: str, name: str, n_args: int):
    """The function ``name`` of SciPy's Cython LAPACK or BLAS ``module`` as a ctypes function of
    ``n_args`` pointers: the pointer in its ``__pyx_capi__``, which jaxlib's CPU kernels call; None
    where that is not there."""
    try:
        import importlib

        capsule = importlib.import_module(module).__pyx_capi__[name]
    except (ImportError, AttributeError, KeyError):
        return None
    # prototypes of our own: the attributes of ctypes.pythonapi's functions are shared by the process
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi)
    )
    pointer = get_pointer(capsule, get_name(capsule))
    return ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * n_args)(pointer) if pointer else None


def _lapack_getrf(dtype):
    """JAX's LU routine on the CPU for ``dtype`` (float64, float32), as a ctypes function: the
    ``getrf`` of SciPy's LAPACK, through the same function pointer that jaxlib's LU kernel calls
    (``scipy.linalg.cython_lapack``); None where that is not there."""
    name = {np.dtype(np.float64): "dgetrf", np.dtype(np.float32): "sgetrf"}.get(np.dtype(dtype))
    return None if name is None else _scipy_function("scipy.linalg.cython_lapack", name, 6)


def _np_lapack(name, vals, p):
    """``lu`` of known matrices (``jax.lax.linalg.lu``: the factors, the 0-based pivots, the
    permutation) computed as JAX computes it on the CPU: each matrix by LAPACK's ``getrf`` through
    jaxlib's own function pointer (:func:`_lapack_getrf`), the permutation from the pivots by
    their row swaps in order (also ``lu_pivots_to_permutation`` of known pivots). The same routine
    on the same column-major matrix: the same bits, without compiling an XLA program for the
    shape. None for other primitives, other dtypes and empty matrices (JAX computes them)."""
    if name == "triangular_solve" and len(vals) == 2:
        return _np_trsm(np.asarray(vals[0]), np.asarray(vals[1]), p)
    if name == "custom_linear_solve":
        return _np_linear_solve(vals, p)
    if name == "lu_pivots_to_permutation" and len(vals) == 1:
        pivots, size = np.asarray(vals[0]), int(p["permutation_size"])
        if pivots.size and not (0 <= pivots.min() and pivots.max() < size and pivots.shape[-1] <= size):
            return None
        return [_permutation(pivots, size)]
    if name != "lu" or len(vals) != 1:
        return None
    x = np.asarray(vals[0])
    if x.ndim < 2 or 0 in x.shape:
        return None
    getrf = _lapack_getrf(x.dtype)
    if getrf is None:
        return None
    m, n = x.shape[-2:]
    k = min(m, n)
    lus = np.empty(x.shape, x.dtype)
    pivots = np.empty(x.shape[:-2] + (k,), np.int32)
    for b in np.ndindex(x.shape[:-2]):
        a = np.asfortranarray(x[b], dtype=x.dtype).copy(order="F")
        ipiv = np.zeros(k, np.intc)
        dims = (ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(max(m, 1)), ctypes.c_int(0))
        getrf(
            ctypes.addressof(dims[0]),
            ctypes.addressof(dims[1]),
            a.ctypes.data,
            ctypes.addressof(dims[2]),
            ipiv.ctypes.data,
            ctypes.addressof(dims[3]),
        )
        if dims[3].value < 0:  # an argument LAPACK refused: JAX's NaNs, left to JAX
            return None
        lus[b] = a
        pivots[b] = ipiv - 1
    return [lus, pivots, _permutation(pivots, m)]


def _blas_trsm(dtype):
    """JAX's triangular solve on the CPU for ``dtype`` (float64, float32), as a ctypes function: the
    ``trsm`` of SciPy's BLAS through the pointer jaxlib's kernel calls (``scipy.linalg.cython_blas``)."""
    name = {np.dtype(np.float64): "dtrsm", np.dtype(np.float32): "strsm"}.get(np.dtype(dtype))
    return None if name is None else _scipy_function("scipy.linalg.cython_blas", name, 11)


def _np_trsm(a, b, p):
    """``triangular_solve`` of known matrices as JAX computes it on the CPU: BLAS's ``trsm``
    (:func:`_blas_trsm`) on each pair of column-major matrices; None where that is not there."""
    trsm = _blas_trsm(a.dtype)
    if trsm is None or b.dtype != a.dtype or a.ndim < 2 or a.shape[:-2] != b.shape[:-2] or 0 in b.shape:
        return None
    flags = [
        ctypes.c_char(b"L" if p["left_side"] else b"R"),
        ctypes.c_char(b"L" if p["lower"] else b"U"),
        ctypes.c_char(b"N" if not p["transpose_a"] else (b"C" if p["conjugate_a"] else b"T")),
        ctypes.c_char(b"U" if p["unit_diagonal"] else b"N"),
    ]
    m, n = b.shape[-2:]
    ints = [ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(max(a.shape[-2], 1)), ctypes.c_int(max(m, 1))]
    alpha = np.ones(1, a.dtype)
    out = np.empty(b.shape, b.dtype)
    for k in np.ndindex(b.shape[:-2]):
        fa = np.asfortranarray(a[k]).copy(order="F")
        fb = np.asfortranarray(b[k]).copy(order="F")
        trsm(
            *[ctypes.addressof(c) for c in flags],
            ctypes.addressof(ints[0]),
            ctypes.addressof(ints[1]),
            alpha.ctypes.data,
            fa.ctypes.data,
            ctypes.addressof(ints[2]),
            fb.ctypes.data,
            ctypes.addressof(ints[3]),
        )
        out[k] = fb
    return [out]


_SOLVE_CALLS = ("pjit", "jit", "closed_call")


def _np_jaxpr(closed, args):
    """The outputs of the closed jaxpr ``closed`` on the known ``args``, each equation evaluated as
    JAX does on the CPU: data movement (:func:`_np_move`), integer and boolean elementwise
    operations, ``triangular_solve`` and ``lu_pivots_to_permutation`` (:func:`_np_lapack`), calls
    (recursively); None where an equation is another (floating-point arithmetic, where XLA's program
    could round otherwise)."""
    from jax.extend import core as jcore

    jaxpr = closed.jaxpr
    env = dict(zip(jaxpr.constvars, closed.consts))
    env.update(zip(jaxpr.invars, args))

    def read(v):
        return np.asarray(v.val) if isinstance(v, jcore.Literal) else np.asarray(env[v])

    for eqn in jaxpr.eqns:
        name, vals = eqn.primitive.name, [read(v) for v in eqn.invars]
        if name in _SOLVE_CALLS and isinstance(eqn.params.get("jaxpr"), jcore.ClosedJaxpr):
            outs = _np_jaxpr(eqn.params["jaxpr"], vals)
        elif name in ("triangular_solve", "lu_pivots_to_permutation"):
            outs = _np_lapack(name, vals, eqn.params)
        else:
            outs = _np_move(name, vals, eqn.params)
            if outs is None and not any(_is_float(v.dtype) for v in vals):
                outs = _np_elementwise(name, vals, eqn.params)
        if outs is None or eqn.effects:
            return None
        for v, o in zip(eqn.outvars, outs):
            o = np.asarray(o)
            if o.shape != tuple(v.aval.shape) or o.dtype.kind != np.dtype(v.aval.dtype).kind:
                return None
            env[v] = o.astype(v.aval.dtype, copy=False)
    return [read(v) for v in jaxpr.outvars]


def _np_linear_solve(vals, p):
    """``custom_linear_solve`` of known operands: its ``solve`` jaxpr on its constants and the
    right-hand side (as JAX's implementation evaluates it), by :func:`_np_jaxpr`."""
    lengths = list(p["const_lengths"])
    start = sum(lengths[:2])
    solve = vals[start : start + lengths[2]]
    return _np_jaxpr(p["jaxprs"].solve, [*solve, *vals[sum(lengths) :]])


def _permutation(pivots, size: int):
    """``jax.lax.linalg.lu_pivots_to_permutation``: the rows of the identity of ``size`` after the
    swaps of row i with row ``pivots[i]``, in order (over the last axis; int32)."""
    pivots = np.asarray(pivots)
    perms = np.empty(pivots.shape[:-1] + (size,), np.int32)
    for b in np.ndindex(pivots.shape[:-1]):
        perm = list(range(size))
        for i, j in enumerate(pivots[b].tolist()):
            perm[i], perm[j] = perm[j], perm[i]
        perms[b] = perm
    return perms


def _squeezed(shape, name, p):
    dims = [d % (len(shape) + (len(p["dimensions"]) if name == "expand_dims" else 0)) for d in p["dimensions"]]
    if name == "squeeze":
        return tuple(n for k, n in enumerate(shape) if k not in dims)
    out, it = [], iter(shape)
    for k in range(len(shape) + len(dims)):
        out.append(1 if k in dims else next(it))
    return tuple(out)
