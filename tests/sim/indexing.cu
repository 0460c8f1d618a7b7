// Built-in index variables over 1D, 2D and 3D grids and blocks, with partial last blocks:
// every thread writes its global linear index and coordinates exactly once.
#include "check.cuh"

#include <vector>

__global__ void write_coordinates(int* out, uint3* coords, int nx, int ny, int nz) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x >= nx || y >= ny || z >= nz) return;  // the partial last blocks
    const int i = (z * ny + y) * nx + x;
    atomicAdd(&out[i], 1 + i);
    coords[i] = make_uint3(blockIdx.x * 1000 + threadIdx.x, blockIdx.y * 1000 + threadIdx.y,
                           gridDim.x * 100 + blockDim.x * 10 + warpSize / 32);
}

int run(dim3 block, int nx, int ny, int nz) {
    const int n = nx * ny * nz;
    int* d_out;
    uint3* d_coords;
    CUDA_OK(cudaMalloc(&d_out, n * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_coords, n * sizeof(uint3)));
    CUDA_OK(cudaMemset(d_out, 0, n * sizeof(int)));
    const dim3 grid((nx + block.x - 1) / block.x, (ny + block.y - 1) / block.y, (nz + block.z - 1) / block.z);
    write_coordinates<<<grid, block>>>(d_out, d_coords, nx, ny, nz);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<int> out(n);
    std::vector<uint3> coords(n);
    CUDA_OK(cudaMemcpy(out.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(coords.data(), d_coords, n * sizeof(uint3), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int z = 0; z < nz; ++z)
        for (int y = 0; y < ny; ++y)
            for (int x = 0; x < nx; ++x) {
                const int i = (z * ny + y) * nx + x;
                const uint3 c = coords[i];
                const unsigned ex = (x / block.x) * 1000 + x % block.x, ey = (y / block.y) * 1000 + y % block.y;
                const unsigned ez = grid.x * 100 + block.x * 10 + 1;
                wrong += out[i] != 1 + i || c.x != ex || c.y != ey || c.z != ez;
            }
    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_coords));
    return wrong;
}

int main() {
    CHECK(run(dim3(128), 1000, 1, 1) == 0);     // 1D, partial last block
    CHECK(run(dim3(1), 7, 1, 1) == 0);          // one thread per block
    CHECK(run(dim3(16, 8), 33, 17, 1) == 0);    // 2D
    CHECK(run(dim3(4, 4, 4), 9, 5, 7) == 0);    // 3D
    CHECK(run(dim3(1024), 1025, 1, 1) == 0);    // the largest block
    CHECK(run(dim3(3, 5, 2), 10, 11, 3) == 0);  // blocks that are not whole warps
    return conformance::finish();
}
