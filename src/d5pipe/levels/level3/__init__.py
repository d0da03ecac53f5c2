"""Level 3: distributed data-parallel training and collective microbenchmarks.

Engines: ``ddp`` (torch DistributedDataParallel, gloo on CPU / nccl on CUDA), ``horovod``
(horovod.torch over MPI) and ``mpi`` (mpi4py, hand-written gradient allreduce). Launchers:
torchrun, mpirun, srun (``launch``). ``point.run_point`` runs one point; ``worker`` is the rank
process; ``strategies`` decide how the ranks exchange gradients or parameters
(``distributed.strategy``: allreduce, topk, local_sgd, ring or a user target) through a byte-counting
``Communicator``; speedup/efficiency across points come from ``scaling.scaling_table``.

This package's ``__init__`` imports nothing, so the rank workers do not pay for pandas or scipy.
"""
