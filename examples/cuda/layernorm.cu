// Layer normalization forward, one block per row: the shape of kernel found in real
// training code (mean and variance by block reduction in shared memory, then
// y = (x - mean) * rstd * weight + bias). Plain C++ linkage, so nvcc mangles its name:
// barecuda finds it from the plain name "layernorm_forward".
#include <cuda_runtime.h>

template <int BLOCK>
__device__ float block_sum(float v, float *shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    float total = shared[0];
    __syncthreads();
    return total;
}

__global__ void layernorm_forward(float *out, float *mean_out, float *rstd_out, const float *inp,
                                  const float *weight, const float *bias, int rows, int cols, float eps) {
    __shared__ float shared[256];
    int row = blockIdx.x;
    if (row >= rows) return;
    const float *x = inp + (long long)row * cols;
    float s = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) s += x[i];
    float mean = block_sum<256>(s, shared) / cols;
    float v = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        float d = x[i] - mean;
        v += d * d;
    }
    float rstd = rsqrtf(block_sum<256>(v, shared) / cols + eps);
    float *y = out + (long long)row * cols;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) y[i] = (x[i] - mean) * rstd * weight[i] + bias[i];
    if (threadIdx.x == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}
