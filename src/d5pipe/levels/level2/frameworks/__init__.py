"""Training frameworks at level 2: the same network, initial weights, batches and optimizer on
PyTorch (eager and compiled), JAX and others, checked step by step against PyTorch in float64.

* :mod:`.graph`: a model traced once (torch.fx) into framework-neutral layers and parameter names;
* :mod:`.contract`: the interface a framework implements, and the optimizer it is told to use;
* :mod:`.torch_framework`, :mod:`.jax_framework`: the built-in frameworks;
* :mod:`.agreement`: the float64 reference run and the checks of losses and updates.
"""
