"""One timed measurement each (collectives, GEMM, convolution, copies, the update, I/O, layers, compression), returned as a result with its Measurement and its request."""
