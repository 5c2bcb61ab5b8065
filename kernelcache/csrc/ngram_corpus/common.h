// Shared helpers of the n-gram corpus kernel (kernelcache). No global mutable state.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace kcng {

// Token used between documents of an external corpus (int32 minimum).
constexpr int32_t kSeparatorToken = INT32_MIN;

// A large array of a trivially copyable T whose all-zero bytes are its initial state.
// Backed by an anonymous mapping: untouched pages cost nothing, zero() hands pages back.
template <class T>
class LazyArray {
 public:
  LazyArray() = default;
  explicit LazyArray(size_t n) { allocate(n); }
  ~LazyArray() { release(); }
  LazyArray(const LazyArray&) = delete;
  LazyArray& operator=(const LazyArray&) = delete;
  LazyArray(LazyArray&& o) noexcept { swap(o); }
  LazyArray& operator=(LazyArray&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  void swap(LazyArray& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    std::swap(bytes_, o.bytes_);
  }
  void allocate(size_t n) {
    release();
    if (n == 0) return;
    bytes_ = n * sizeof(T);
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
      bytes_ = 0;
      throw std::bad_alloc();
    }
    p_ = static_cast<T*>(p);
    n_ = n;
  }
  // Back to all zero bytes; the pages are returned to the OS.
  void zero() {
    if (p_ && madvise(p_, bytes_, MADV_DONTNEED) != 0) std::memset(static_cast<void*>(p_), 0, bytes_);
  }
  void release() {
    if (p_) munmap(p_, bytes_);
    p_ = nullptr;
    n_ = 0;
    bytes_ = 0;
  }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  size_t size() const { return n_; }
  size_t bytes() const { return bytes_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
  size_t bytes_ = 0;
};

// 64-bit finaliser (bijective) used to place (owner, token) keys in open-addressing tables.
inline uint64_t mix_key(int32_t owner, int32_t token) {
  uint64_t x = (static_cast<uint64_t>(static_cast<uint32_t>(owner)) << 32) | static_cast<uint32_t>(token);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

inline size_t next_pow2(size_t v) {
  size_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace kcng
