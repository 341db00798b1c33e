// BLAKE3 (the unkeyed hash, 32-byte output) of a buffer in the GPU's memory: the commitment a CUDA
// evaluation's timed calls make to their outputs (runner/blake3.py says why and how it is used).
//
// One thread per 1 KiB chunk computes the chunk's chaining value; then each launch of `parents`
// merges neighbours pairwise, an odd last node going up unchanged, which is BLAKE3's left-complete
// tree; the launch that leaves one node sets ROOT. A one-chunk input gets ROOT on its last block.
//
// The same functions build for the host (`g++ -x c++ -DBLAKE3_HOST`), where the tests check them
// against BLAKE3's published test vectors without a GPU.
//
// PTX: nvcc -ptx -arch=compute_80 -O3 -o runner/blake3.ptx runner/blake3.cu &&
//      sed -i 's/^\.version .*/.version 7.0/' runner/blake3.ptx
// (ISA 7.0, CUDA 11's, which the instructions used all belong to: a driver older than the nvcc
// loads it. tests/test_blake3.py checks that runner/blake3.ptx is what this file builds to.)
#ifdef BLAKE3_HOST
#include <stdint.h>
#include <string.h>
#define B3_FN static inline
#else
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned char uint8_t;
#define B3_FN __device__ __forceinline__
#endif

#define B3_CHUNK 1024ULL
#define B3_CHUNK_START 1u
#define B3_CHUNK_END 2u
#define B3_PARENT 4u
#define B3_ROOT 8u

#ifdef BLAKE3_HOST
static const uint32_t B3_IV[8] = {
#else
__constant__ uint32_t B3_IV[8] = {
#endif
    0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au, 0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u};

B3_FN uint32_t b3_rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

#define B3_G(a, b, c, d, x, y)          \
  do {                                  \
    s[a] = s[a] + s[b] + (x);           \
    s[d] = b3_rotr(s[d] ^ s[a], 16);    \
    s[c] = s[c] + s[d];                 \
    s[b] = b3_rotr(s[b] ^ s[c], 12);    \
    s[a] = s[a] + s[b] + (y);           \
    s[d] = b3_rotr(s[d] ^ s[a], 8);     \
    s[c] = s[c] + s[d];                 \
    s[b] = b3_rotr(s[b] ^ s[c], 7);     \
  } while (0)

// The message schedule of round r: BLAKE3's permutation applied r times, written out.
#define B3_ROUND(m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15) \
  do {                                                                                   \
    B3_G(0, 4, 8, 12, m[m0], m[m1]);                                                     \
    B3_G(1, 5, 9, 13, m[m2], m[m3]);                                                     \
    B3_G(2, 6, 10, 14, m[m4], m[m5]);                                                    \
    B3_G(3, 7, 11, 15, m[m6], m[m7]);                                                    \
    B3_G(0, 5, 10, 15, m[m8], m[m9]);                                                    \
    B3_G(1, 6, 11, 12, m[m10], m[m11]);                                                  \
    B3_G(2, 7, 8, 13, m[m12], m[m13]);                                                   \
    B3_G(3, 4, 9, 14, m[m14], m[m15]);                                                   \
  } while (0)

// cv <- the first 8 words of compress(cv, m, counter, len, flags).
B3_FN void b3_compress(uint32_t cv[8], const uint32_t m[16], uint64_t counter, uint32_t len, uint32_t flags) {
  uint32_t s[16] = {cv[0], cv[1], cv[2], cv[3], cv[4], cv[5], cv[6], cv[7],
                    B3_IV[0], B3_IV[1], B3_IV[2], B3_IV[3],
                    (uint32_t)counter, (uint32_t)(counter >> 32), len, flags};
  B3_ROUND(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  B3_ROUND(2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8);
  B3_ROUND(3, 4, 10, 12, 13, 2, 7, 14, 6, 5, 9, 0, 11, 15, 8, 1);
  B3_ROUND(10, 7, 12, 9, 14, 3, 13, 15, 4, 0, 11, 2, 5, 8, 1, 6);
  B3_ROUND(12, 13, 9, 11, 15, 10, 14, 8, 7, 2, 5, 3, 0, 1, 6, 4);
  B3_ROUND(9, 14, 11, 5, 8, 12, 15, 1, 13, 3, 0, 10, 2, 6, 4, 7);
  B3_ROUND(11, 15, 5, 0, 1, 9, 8, 6, 14, 10, 2, 12, 3, 4, 7, 13);
  for (int i = 0; i < 8; ++i) cv[i] = s[i] ^ s[i + 8];
}

// The chaining value of chunk `i` of `data` (`n` bytes), into out[0..8]; `root` when it is the only chunk.
B3_FN void b3_chunk(const uint8_t* data, uint64_t n, uint64_t i, uint32_t root, uint32_t out[8]) {
  uint64_t start = i * B3_CHUNK;
  uint64_t len = n - start < B3_CHUNK ? n - start : B3_CHUNK;
  uint32_t blocks = len == 0 ? 1u : (uint32_t)((len + 63) / 64);
  uint32_t cv[8];
  for (int k = 0; k < 8; ++k) cv[k] = B3_IV[k];
  const uint8_t* p = data + start;
  for (uint32_t b = 0; b < blocks; ++b) {
    uint32_t m[16];
    uint64_t off = (uint64_t)b * 64;
    uint32_t bl = (uint32_t)(len - off < 64 ? len - off : 64);
    if (bl == 64 && ((((uint64_t)(p + off)) & 3) == 0)) {
      const uint32_t* w = (const uint32_t*)(p + off);  // little-endian words, as BLAKE3 reads them
      for (int k = 0; k < 16; ++k) m[k] = w[k];
    } else {
      for (int k = 0; k < 16; ++k) {
        uint32_t v = 0;
        for (int j = 0; j < 4; ++j) {
          uint32_t at = (uint32_t)(4 * k + j);
          if (at < bl) v |= ((uint32_t)p[off + at]) << (8 * j);
        }
        m[k] = v;
      }
    }
    uint32_t flags = (b == 0 ? B3_CHUNK_START : 0u) | (b + 1 == blocks ? (B3_CHUNK_END | (root ? B3_ROOT : 0u)) : 0u);
    b3_compress(cv, m, i, bl, flags);
  }
  for (int k = 0; k < 8; ++k) out[k] = cv[k];
}

// Node j of the next level from the `count` nodes of `in` (8 words each).
B3_FN void b3_parent(const uint32_t* in, uint64_t count, uint64_t j, uint32_t* out) {
  if (2 * j + 1 >= count) {
    for (int k = 0; k < 8; ++k) out[8 * j + k] = in[16 * j + k];
    return;
  }
  uint32_t m[16], cv[8];
  for (int k = 0; k < 16; ++k) m[k] = in[16 * j + k];
  for (int k = 0; k < 8; ++k) cv[k] = B3_IV[k];
  b3_compress(cv, m, 0, 64, B3_PARENT | (count == 2 ? B3_ROOT : 0u));
  for (int k = 0; k < 8; ++k) out[8 * j + k] = cv[k];
}

#ifdef BLAKE3_HOST
// The whole hash on the host, for the tests: 32 bytes into out.
extern "C" void blake3_host(const uint8_t* data, uint64_t n, uint8_t out[32]) {
  uint64_t chunks = n == 0 ? 1 : (n + B3_CHUNK - 1) / B3_CHUNK;
  uint32_t* a = new uint32_t[8 * chunks];
  uint32_t* b = new uint32_t[8 * chunks];
  for (uint64_t i = 0; i < chunks; ++i) b3_chunk(data, n, i, chunks == 1, a + 8 * i);
  for (uint64_t count = chunks; count > 1; count = (count + 1) / 2) {
    for (uint64_t j = 0; j < (count + 1) / 2; ++j) b3_parent(a, count, j, b);
    uint32_t* t = a; a = b; b = t;
  }
  memcpy(out, a, 32);
  delete[] a;
  delete[] b;
}
#else
extern "C" __global__ void blake3_chunks(const uint8_t* data, uint64_t n, uint64_t chunks, uint32_t* out) {
  uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < chunks) b3_chunk(data, n, i, chunks == 1, out + 8 * i);
}

extern "C" __global__ void blake3_parents(const uint32_t* in, uint64_t count, uint32_t* out) {
  uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (j < (count + 1) / 2) b3_parent(in, count, j, out);
}
#endif
