// Device-side assert (NVRTC's built-in assert lowers to `call __assertfail`).
extern "C" __global__ void checked_sqrt(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        assert(v >= 0.0f);
        y[i] = sqrtf(v);
    }
}
