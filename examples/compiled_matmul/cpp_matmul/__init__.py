"""C++ matmul kernels for d5pipe's level 0 (``matmul.cpp``): built by the pipeline, not imported as Python."""
