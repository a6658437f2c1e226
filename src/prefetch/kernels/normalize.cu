// The normalize kernel of imagefeed's `cuda` feature, compiled at run time with NVRTC
// (src/prefetch/cuda/kernel.rs includes this file with `include_str!`). One thread per pixel: `u8` RGB
// in (NHWC), the output dtype out in NHWC or NCHW. No headers: `f16` rounding is the PTX
// instruction `cuda_fp16.h` uses, `bf16` rounding is the `half` crate's.

// Passed by value; the same layout as `KernelParams` in cuda/kernel.rs.
struct Params {
    unsigned long long pixels;
    unsigned long long plane;
    unsigned int nchw;
    unsigned int pad;
    float scale[3];
    float bias[3];
};

__device__ __forceinline__ float imagefeed_norm(unsigned char v, float s, float b) {
    float m, r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(m) : "f"((float)v), "f"(s));
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(m), "f"(b));
    return r;
}

struct ToF32 {
    typedef float T;
    static __device__ __forceinline__ float cv(unsigned char v, float s, float b) {
        return imagefeed_norm(v, s, b);
    }
};

struct ToF16 {
    typedef unsigned short T;
    static __device__ __forceinline__ unsigned short cv(unsigned char v, float s, float b) {
        unsigned short h;
        float f = imagefeed_norm(v, s, b);
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
        return h;
    }
};

struct ToBf16 {
    typedef unsigned short T;
    static __device__ __forceinline__ unsigned short cv(unsigned char v, float s, float b) {
        union { float f; unsigned int u; } x;
        x.f = imagefeed_norm(v, s, b);
        unsigned int u = x.u;
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            return (unsigned short)((u >> 16) | 0x40u);
        }
        u += 0x7fffu + ((u >> 16) & 1u);
        return (unsigned short)(u >> 16);
    }
};

struct ToU8 {
    typedef unsigned char T;
    static __device__ __forceinline__ unsigned char cv(unsigned char v, float, float) {
        return v;
    }
};

template <typename Op>
__device__ __forceinline__ void convert(const unsigned char* __restrict__ src,
                                        typename Op::T* __restrict__ dst, const Params& p) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < p.pixels; i += stride) {
        const unsigned char* s = src + 3ull * i;
        typename Op::T r = Op::cv(s[0], p.scale[0], p.bias[0]);
        typename Op::T g = Op::cv(s[1], p.scale[1], p.bias[1]);
        typename Op::T b = Op::cv(s[2], p.scale[2], p.bias[2]);
        if (p.nchw) {
            unsigned long long img = i / p.plane;
            unsigned long long at = img * 3ull * p.plane + (i - img * p.plane);
            dst[at] = r;
            dst[at + p.plane] = g;
            dst[at + 2ull * p.plane] = b;
        } else {
            dst[3ull * i] = r;
            dst[3ull * i + 1ull] = g;
            dst[3ull * i + 2ull] = b;
        }
    }
}

extern "C" __global__ void imagefeed_u8_to_f32(const unsigned char* src, float* dst, Params p) {
    convert<ToF32>(src, dst, p);
}
extern "C" __global__ void imagefeed_u8_to_f16(const unsigned char* src, unsigned short* dst, Params p) {
    convert<ToF16>(src, dst, p);
}
extern "C" __global__ void imagefeed_u8_to_bf16(const unsigned char* src, unsigned short* dst, Params p) {
    convert<ToBf16>(src, dst, p);
}
extern "C" __global__ void imagefeed_u8_to_u8(const unsigned char* src, unsigned char* dst, Params p) {
    convert<ToU8>(src, dst, p);
}
