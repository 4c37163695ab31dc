"""Native kernels: a traced program as one C function (see :mod:`livens.native.codegen`)."""
from .build import CompileError, Kernel, compile_function, compiler, wait
from .codegen import Unsupported, translate

__all__ = ["CompileError", "Kernel", "Unsupported", "compile_function", "compiler", "translate", "wait"]
