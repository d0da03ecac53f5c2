"""Training frameworks at level 2: the same network, initial weights, batches and optimizer on
PyTorch (eager and compiled), JAX and others, checked step by step against PyTorch in float64.

* :mod:`.graph`: the framework-neutral layers; :mod:`.trace`: a model traced once (torch.export) into them;
* :mod:`.contract`: the engine a framework builds, and the optimizer it is told to use;
* :mod:`.torch_framework`, :mod:`.jax_framework`, :mod:`.tf_framework`: the built-ins, each with its
  declaration (d5pipe.levels.declare.Builtin), collected here in :data:`FRAMEWORKS` (torch-free);
  adding one is a module and a line here;
* :mod:`.agreement`: the float64 reference run and the checks of losses and updates.
"""

from __future__ import annotations

from d5pipe.levels.declare import Builtin, declared
from d5pipe.levels.level2.frameworks import jax_framework, tf_framework, torch_framework

FRAMEWORKS: dict[str, Builtin] = declared(torch_framework.TORCH, torch_framework.COMPILE, jax_framework.FRAMEWORK,
                                          tf_framework.FRAMEWORK)
"""The built-ins of ``train.framework`` (each called with the point's ``model`` and ``dtype``, as a user's is)."""
