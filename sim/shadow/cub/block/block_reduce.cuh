// Shadows CUB for the simulator build.
#error "CUB does not run on the pd::sim CPU simulator: kernels using CUB are CUDA-only variants (build them with nvcc)"
