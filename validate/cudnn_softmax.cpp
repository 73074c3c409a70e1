// gpuprov validation sample: one cuDNN softmax on the GPU, results printed for
// validate/checks/cudnn.py to read back (validate/softmax_sample.py parses it).
//
// Input: 1000 floats in [0, 1) from an explicit implementation of the classic
// glibc TYPE_3 additive-feedback generator seeded with 1234, each value being
// float(r) / 2^31.  The generator is written out here (not std::rand) so the
// input is identical on every C library, and the Python side recomputes the
// very same input for its CPU reference (validate/softmax_sample.py: sample_input).
// With seed 1234 the input equals that of the original tutorial program, whose
// published GPU output (top-5 positions 754 814 961 938 717) is a test fixture.
//
// Output (stdout, one record per line, space separated):
//   gpuprov-cudnn-softmax 1          format marker and version
//   cudnn_header N                   CUDNN_VERSION the program was compiled with
//   cudnn_runtime N                  cudnnGetVersion() of the loaded library
//   cudart_runtime N                 cudaRuntimeGetVersion()
//   cuda_driver N                    cudaDriverGetVersion() (0: no driver)
//   shape N C H W
//   input_sum S                      sum of the inputs, double precision (host only,
//                                    printed before any GPU call)
//   devices N                        cudaGetDeviceCount()
//   device I CC_MAJOR CC_MINOR NAME  for the device used (NAME may contain spaces)
//   sum S                            sum of the softmax outputs, double precision
//   top K POS VAL                    the five largest outputs, K = 0..4
//   status ok | status fail
// On failure the CUDA or cuDNN error name and text go to stderr as
//   error cuda|cudnn CALL: NAME: TEXT
// and the program exits 1 (CUDA) or 2 (cuDNN).

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>
#include <cudnn.h>

namespace {

const int kN = 1;
const int kC = 1000;
const int kH = 1;
const int kW = 1;
const unsigned kSeed = 1234;
const int kTop = 5;

void fail_cuda(const char *call, cudaError_t err) {
    std::fprintf(stderr, "error cuda %s: %s: %s\n", call,
                 cudaGetErrorName(err), cudaGetErrorString(err));
    std::printf("status fail\n");
    std::fflush(stdout);
    std::exit(1);
}

void fail_cudnn(const char *call, cudnnStatus_t st) {
    std::fprintf(stderr, "error cudnn %s: %s", call, cudnnGetErrorString(st));
#if defined(CUDNN_MAJOR) && CUDNN_MAJOR >= 9
    char detail[1024];
    detail[0] = '\0';
    cudnnGetLastErrorString(detail, sizeof(detail));
    if (detail[0] != '\0') {
        std::fprintf(stderr, ": %s", detail);
    }
#endif
    std::fprintf(stderr, "\n");
    std::printf("status fail\n");
    std::fflush(stdout);
    std::exit(2);
}

#define CUDA_OK(call)                              \
    do {                                           \
        cudaError_t e_ = (call);                   \
        if (e_ != cudaSuccess) fail_cuda(#call, e_); \
    } while (0)

#define CUDNN_OK(call)                                        \
    do {                                                      \
        cudnnStatus_t s_ = (call);                            \
        if (s_ != CUDNN_STATUS_SUCCESS) fail_cudnn(#call, s_); \
    } while (0)

// The additive-feedback generator glibc's rand() uses by default (TYPE_3,
// degree 31, separation 3), written out so every platform gets the same stream.
class AdditiveGenerator {
public:
    explicit AdditiveGenerator(unsigned seed) {
        long long r[34];
        r[0] = static_cast<long long>(seed);
        for (int i = 1; i < 31; i++) {
            long long hi = r[i - 1] / 127773;
            long long lo = r[i - 1] % 127773;
            long long word = 16807 * lo - 2836 * hi;
            if (word < 0) word += 2147483647;
            r[i] = word;
        }
        for (int i = 31; i < 34; i++) r[i] = r[i - 31];
        for (int i = 0; i < 34; i++) ring_[i] = static_cast<unsigned>(r[i]);
        // Discard the first 310 outputs, as glibc's srandom does.
        count_ = 34;
        for (int i = 34; i < 344; i++) step();
    }
    // Next value in [0, 2^31).
    unsigned next() { return step() >> 1; }

private:
    unsigned step() {
        // ring_ keeps the last 34 raw values; r[k] = r[k-31] + r[k-3] (mod 2^32)
        unsigned a = ring_[(count_ - 31) % 34];
        unsigned b = ring_[(count_ - 3) % 34];
        unsigned v = a + b;
        ring_[count_ % 34] = v;
        count_++;
        return v;
    }
    unsigned ring_[34];
    unsigned long long count_;
};

void top_k(const std::vector<float> &v, int k, int *pos, float *val) {
    for (int i = 0; i < k; i++) {
        pos[i] = -1;
        val[i] = 0.0f;
    }
    for (int p = 0; p < static_cast<int>(v.size()); p++) {
        int slot = -1;
        for (int i = 0; i < k; i++) {
            if (pos[i] < 0 || v[p] > val[i]) {
                slot = i;
                break;
            }
        }
        if (slot < 0) continue;
        for (int i = k - 1; i > slot; i--) {
            pos[i] = pos[i - 1];
            val[i] = val[i - 1];
        }
        pos[slot] = p;
        val[slot] = v[p];
    }
}

}  // namespace

int main() {
    std::printf("gpuprov-cudnn-softmax 1\n");
    std::printf("cudnn_header %d\n", static_cast<int>(CUDNN_VERSION));
    std::printf("cudnn_runtime %zu\n", static_cast<size_t>(cudnnGetVersion()));
    int rt = 0;
    int drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    std::printf("cudart_runtime %d\n", rt);
    std::printf("cuda_driver %d\n", drv);
    std::printf("shape %d %d %d %d\n", kN, kC, kH, kW);
    const int size = kN * kC * kH * kW;
    std::vector<float> host_in(size);
    std::vector<float> host_out(size, -1.0f);
    AdditiveGenerator gen(kSeed);
    double input_sum = 0.0;
    for (int i = 0; i < size; i++) {
        host_in[i] = static_cast<float>(gen.next()) / 2147483648.0f;
        input_sum += host_in[i];
    }
    std::printf("input_sum %.9f\n", input_sum);
    std::fflush(stdout);

    int count = 0;
    CUDA_OK(cudaGetDeviceCount(&count));
    std::printf("devices %d\n", count);
    CUDA_OK(cudaSetDevice(0));
    cudaDeviceProp prop;
    std::memset(&prop, 0, sizeof(prop));
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device 0 %d %d %s\n", prop.major, prop.minor, prop.name);
    std::fflush(stdout);

    cudnnHandle_t handle;
    CUDNN_OK(cudnnCreate(&handle));
    cudnnTensorDescriptor_t desc;
    CUDNN_OK(cudnnCreateTensorDescriptor(&desc));
    CUDNN_OK(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                        kN, kC, kH, kW));


    float *dev_in = nullptr;
    float *dev_out = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void **>(&dev_in), size * sizeof(float)));
    CUDA_OK(cudaMalloc(reinterpret_cast<void **>(&dev_out), size * sizeof(float)));
    CUDA_OK(cudaMemcpy(dev_in, host_in.data(), size * sizeof(float), cudaMemcpyHostToDevice));

    const float one = 1.0f;
    const float zero = 0.0f;
    CUDNN_OK(cudnnSoftmaxForward(handle, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE,
                                 &one, desc, dev_in, &zero, desc, dev_out));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(host_out.data(), dev_out, size * sizeof(float), cudaMemcpyDeviceToHost));

    double sum = 0.0;
    for (int i = 0; i < size; i++) sum += host_out[i];
    std::printf("sum %.9f\n", sum);
    int pos[kTop];
    float val[kTop];
    top_k(host_out, kTop, pos, val);
    for (int i = 0; i < kTop; i++) {
        std::printf("top %d %d %.9g\n", i, pos[i], val[i]);
    }

    cudaFree(dev_out);
    cudaFree(dev_in);
    cudnnDestroyTensorDescriptor(desc);
    cudnnDestroy(handle);
    std::printf("status ok\n");
    return 0;
}
