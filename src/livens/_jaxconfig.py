"""float64 everywhere (DESIGN: Newton, time loop), set before any array is created."""
import jax

jax.config.update("jax_enable_x64", True)
