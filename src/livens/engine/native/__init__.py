"""Native kernels: a traced program as one C function (see :mod:`livens.engine.native.codegen`)."""

from .build import (
    CompileError,
    Kernel,
    Traced,
    compile_function,
    compile_traced,
    compiler,
    interrupt,
    resume,
    trace_function,
    wait,
)
from .codegen import Unsupported, translate

__all__ = [
    "CompileError",
    "Kernel",
    "Traced",
    "Unsupported",
    "compile_function",
    "compile_traced",
    "compiler",
    "interrupt",
    "resume",
    "trace_function",
    "translate",
    "wait",
]
