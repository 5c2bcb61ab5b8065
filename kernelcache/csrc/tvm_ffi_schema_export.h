// Pre-included (-include) by kernelcache into a tvm-ffi module's C++/CUDA translation units that
// use TVM_FFI_DLL_EXPORT_TYPED_FUNC. It exports the same __tvm_ffi__metadata_<name> function,
// returning the same JSON, as tvm-ffi's own macro under TVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1,
// which kernelcache needs: every load compares each function's exported type schema with the
// one the spec declares, so a stale or foreign binary is refused before it can be called.
//
// Why not tvm-ffi's macro as shipped: its metadata function is an inline std::ostringstream
// chain, optimized with the module, in every exporting function: ~10% of a tiny module's compile
// (0.09-0.10 s of g++ -O2 time). Here every type's part of the schema is still tvm-ffi's own
// detail::TypeSchema<T>::v() (the types are named exactly as tvm-ffi names them), and the parts
// are laid out as tvm-ffi's FuncFunctorImpl::TypeSchema lays them out (tests compare the two
// byte for byte over many signatures); the code around them is out of line, shared by a
// translation unit's exports, and not optimized (it runs once per load, for microseconds).
//
// A caller who opted out of metadata (-UTVM_FFI_DLL_EXPORT_INCLUDE_METADATA) keeps the opt-out.
#ifndef KERNELCACHE_TVM_FFI_SCHEMA_EXPORT_H_
#define KERNELCACHE_TVM_FFI_SCHEMA_EXPORT_H_

#include <tvm/ffi/function.h>

#if TVM_FFI_DLL_EXPORT_INCLUDE_METADATA
#include <cstdlib>
#include <cstring>
#include <string>

// Not optimized: g++ spends ~half of the metadata's compile time optimizing code that runs once.
// clang reads its own spelling; nvcc's front end knows neither (it would warn), so .cu files
// keep the default.
#if defined(__CUDACC__)
#elif defined(__clang__)
#pragma clang optimize off
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("O0")
#endif

namespace kernelcache_schema_export {

// {"type_schema":"<schema, JSON-escaped as tvm-ffi's EscapeStringJSON does>"} as a tvm-ffi
// string (allocated by libtvm_ffi).
[[gnu::noinline]] inline int Metadata(const char* schema, size_t n, TVMFFIAny* result) {
  static const char kHex[] = "0123456789abcdef";
  static const char kHead[] = "{\"type_schema\":\"";
  const size_t head = sizeof(kHead) - 1;
  char* buf = static_cast<char*>(std::malloc(head + 6 * n + 2));
  if (buf == nullptr) {
    TVMFFIErrorSetRaisedFromCStr("MemoryError", "kernelcache: no memory for a function's schema");
    return -1;
  }
  std::memcpy(buf, kHead, head);
  size_t k = head;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char u = static_cast<unsigned char>(schema[i]);
    const char* esc = u == '"' ? "\\\"" : u == '\\' ? "\\\\" : u == '/' ? "\\/" : u == '\b' ? "\\b"
                    : u == '\f' ? "\\f" : u == '\n' ? "\\n" : u == '\r' ? "\\r" : u == '\t' ? "\\t" : nullptr;
    if (esc != nullptr) {
      buf[k++] = esc[0];
      buf[k++] = esc[1];
    } else if (u < 0x20 || u == 0x7f) {
      std::memcpy(buf + k, "\\u00", 4);
      buf[k + 4] = kHex[u >> 4];
      buf[k + 5] = kHex[u & 15];
      k += 6;
    } else {
      buf[k++] = static_cast<char>(u);
    }
  }
  buf[k++] = '"';
  buf[k++] = '}';
  TVMFFIByteArray bytes{buf, k};
  const int rc = TVMFFIStringFromByteArray(&bytes, result);
  std::free(buf);
  return rc;
}

// The function's schema: {"type":"ffi.Function","named_args":{"return":[R],"params":[A,...]}},
// as tvm-ffi's FuncFunctorImpl::TypeSchema writes it, each part from tvm-ffi's TypeSchema<T>.
class Builder {
 public:
  Builder() : s_("{\"type\":\"ffi.Function\",\"named_args\":{\"return\":[") {}
  [[gnu::noinline]] void Type(const std::string& part) {
    if (sep_) s_.push_back(',');
    s_.append(part);
    sep_ = true;
  }
  [[gnu::noinline]] void Params() {
    s_.append("],\"params\":[");
    sep_ = false;
  }
  [[gnu::noinline]] int Finish(TVMFFIAny* result) {
    s_.append("]}}");
    return Metadata(s_.data(), s_.size(), result);
  }

 private:
  std::string s_;
  bool sep_ = false;
};

// One instance per distinct type in a translation unit, whichever functions use it.
template <class T>
[[gnu::noinline]] void Put(Builder* b) {
  b->Type(::tvm::ffi::detail::TypeSchema<T>::v());
}

template <class Sig>
struct Compose;
template <class R, class... Args>
struct Compose<R(Args...)> {
  [[gnu::noinline]] static int Run(TVMFFIAny* result) {
    Builder b;
    Put<R>(&b);
    b.Params();
    (Put<Args>(&b), ...);
    return b.Finish(result);
  }
};

// The exported metadata function's body (a C++ exception becomes a tvm-ffi error, as tvm-ffi's
// macro does it), out of line so that the exported function itself is a forwarding call.
template <class F>
[[gnu::noinline]] int Export(TVMFFIAny* result) {
  TVM_FFI_SAFE_CALL_BEGIN();
  return Compose<typename ::tvm::ffi::detail::FunctionInfo<F>::FType>::Run(result);
  TVM_FFI_SAFE_CALL_END();
}

}  // namespace kernelcache_schema_export

#if defined(__CUDACC__)
#elif defined(__clang__)
#pragma clang optimize on
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

#undef TVM_FFI_DLL_EXPORT_TYPED_FUNC
#define TVM_FFI_DLL_EXPORT_TYPED_FUNC(ExportName, Function)                                      \
  TVM_FFI_DLL_EXPORT_TYPED_FUNC_IMPL_(ExportName, Function)                                      \
  extern "C" {                                                                                   \
  TVM_FFI_DLL_EXPORT int __tvm_ffi__metadata_##ExportName(void* self, const TVMFFIAny* args,     \
                                                          int32_t num_args, TVMFFIAny* result) { \
    (void)self, (void)args, (void)num_args;                                                      \
    return ::kernelcache_schema_export::Export<std::decay_t<decltype(Function)>>(result);       \
  }                                                                                              \
  }
#endif  // TVM_FFI_DLL_EXPORT_INCLUDE_METADATA

#endif  // KERNELCACHE_TVM_FFI_SCHEMA_EXPORT_H_
