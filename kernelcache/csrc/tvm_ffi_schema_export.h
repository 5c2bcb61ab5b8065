// kernelcache's schema export for tvm-ffi modules, in two halves that share this one file (so
// that the dependency record of every exporting source, which lists this file, keys both):
//
// - C++ (pre-included with -include into a tvm-ffi module's C++/CUDA translation units that use
//   TVM_FFI_DLL_EXPORT_TYPED_FUNC): exports the same __tvm_ffi__metadata_<name> function,
//   returning the same JSON, as tvm-ffi's own macro under TVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1,
//   which kernelcache needs: every load compares each function's exported type schema with the
//   one the spec declares, so a stale or foreign binary is refused before it can be called.
// - C (included by the entry's identity object, which is compiled as C beside the sources on
//   the other core): the text builder that lays the parts out and escapes them.
//
// Why not tvm-ffi's macro as shipped: its metadata function is an inline std::ostringstream
// chain, optimized with the module, in every exporting function: ~10% of a tiny module's compile
// (0.09-0.10 s of g++ -O2 time). Here every type's part of the schema is still tvm-ffi's own
// detail::TypeSchema<T>::v() (the types are named exactly as tvm-ffi names them), and the parts
// are laid out as tvm-ffi's FuncFunctorImpl::TypeSchema lays them out (tests compare the two
// byte for byte over many signatures). What must stay in the module's translation unit (one
// call per distinct type) is not optimized; the rest, string building and JSON escaping, is C in
// the identity object: built with std::string in the module's translation unit it cost ~15 ms
// of a tiny module's compile, in C there it costs nothing on the critical path.
//
// A caller who opted out of metadata (-UTVM_FFI_DLL_EXPORT_INCLUDE_METADATA) keeps the opt-out.
#ifndef KERNELCACHE_TVM_FFI_SCHEMA_EXPORT_H_
#define KERNELCACHE_TVM_FFI_SCHEMA_EXPORT_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
// The schema text being built: {"type":"ffi.Function","named_args":{"return":[R],"params":[A,...]}}
// (a plain C struct: the C++ half keeps it on its stack, the C half grows its buffer).
typedef struct {
  char* data;
  size_t size, capacity;
  int separate, failed;
} KernelcacheSchemaText;
// Hidden: each module binds to its own copy, whatever else the process has loaded.
__attribute__((visibility("hidden"))) void __kernelcache_schema_part(KernelcacheSchemaText* t, const char* part,
                                                                      size_t n);
__attribute__((visibility("hidden"))) void __kernelcache_schema_params(KernelcacheSchemaText* t);
// {"type_schema":"<the schema, JSON-escaped as tvm-ffi's EscapeStringJSON does>"}, malloc'd (the
// caller frees it), or NULL when out of memory; ``t``'s buffer is freed either way.
__attribute__((visibility("hidden"))) char* __kernelcache_schema_json(KernelcacheSchemaText* t, size_t* n);
#ifdef __cplusplus
}
#endif

#ifndef __cplusplus
// -- the C half: compiled once per entry, in its identity object --------------------------------
#include <stdlib.h>
#include <string.h>

static void kernelcache_schema_append(KernelcacheSchemaText* t, const char* s, size_t n) {
  if (t->failed) return;
  if (t->size + n > t->capacity) {
    size_t cap = t->capacity ? t->capacity : 256;
    while (cap < t->size + n) cap *= 2;
    char* grown = (char*)realloc(t->data, cap);
    if (grown == NULL) {
      t->failed = 1;
      return;
    }
    t->data = grown;
    t->capacity = cap;
  }
  memcpy(t->data + t->size, s, n);
  t->size += n;
}

void __kernelcache_schema_part(KernelcacheSchemaText* t, const char* part, size_t n) {
  static const char kHead[] = "{\"type\":\"ffi.Function\",\"named_args\":{\"return\":[";
  if (t->size == 0) kernelcache_schema_append(t, kHead, sizeof(kHead) - 1);
  if (t->separate) kernelcache_schema_append(t, ",", 1);
  kernelcache_schema_append(t, part, n);
  t->separate = 1;
}

void __kernelcache_schema_params(KernelcacheSchemaText* t) {
  static const char kParams[] = "],\"params\":[";
  kernelcache_schema_append(t, kParams, sizeof(kParams) - 1);
  t->separate = 0;
}

char* __kernelcache_schema_json(KernelcacheSchemaText* t, size_t* n) {
  static const char kHex[] = "0123456789abcdef";
  static const char kHead[] = "{\"type_schema\":\"";
  const size_t head = sizeof(kHead) - 1;
  char* buf = NULL;
  size_t i, k = head;
  kernelcache_schema_append(t, "]}}", 3);
  if (!t->failed) buf = (char*)malloc(head + 6 * t->size + 3);
  if (buf != NULL) {
    memcpy(buf, kHead, head);
    for (i = 0; i < t->size; ++i) {
      const unsigned char u = (unsigned char)t->data[i];
      const char* esc = u == '"' ? "\\\"" : u == '\\' ? "\\\\" : u == '/' ? "\\/" : u == '\b' ? "\\b"
                      : u == '\f' ? "\\f" : u == '\n' ? "\\n" : u == '\r' ? "\\r" : u == '\t' ? "\\t" : NULL;
      if (esc != NULL) {
        buf[k++] = esc[0];
        buf[k++] = esc[1];
      } else if (u < 0x20 || u == 0x7f) {
        memcpy(buf + k, "\\u00", 4);
        buf[k + 4] = kHex[u >> 4];
        buf[k + 5] = kHex[u & 15];
        k += 6;
      } else {
        buf[k++] = (char)u;
      }
    }
    buf[k++] = '"';
    buf[k++] = '}';
    *n = k;
  }
  free(t->data);
  t->data = NULL;
  t->size = t->capacity = 0;
  return buf;
}

#else
// -- the C++ half: pre-included into exporting translation units --------------------------------
#include <tvm/ffi/function.h>

#if TVM_FFI_DLL_EXPORT_INCLUDE_METADATA
#include <cstdlib>
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

// One instance per distinct type in a translation unit, whichever functions use it.
template <class T>
[[gnu::noinline]] void Put(KernelcacheSchemaText* t) {
  const std::string part = ::tvm::ffi::detail::TypeSchema<T>::v();
  __kernelcache_schema_part(t, part.data(), part.size());
}

template <class Sig>
struct Compose;
template <class R, class... Args>
struct Compose<R(Args...)> {
  [[gnu::noinline]] static int Run(TVMFFIAny* result) {
    KernelcacheSchemaText t{nullptr, 0, 0, 0, 0};
    Put<R>(&t);
    __kernelcache_schema_params(&t);
    (Put<Args>(&t), ...);
    size_t n = 0;
    char* json = __kernelcache_schema_json(&t, &n);
    if (json == nullptr) {
      TVMFFIErrorSetRaisedFromCStr("MemoryError", "kernelcache: no memory for a function's schema");
      return -1;
    }
    TVMFFIByteArray bytes{json, n};
    const int rc = TVMFFIStringFromByteArray(&bytes, result);
    std::free(json);
    return rc;
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
#endif  // __cplusplus

#endif  // KERNELCACHE_TVM_FFI_SCHEMA_EXPORT_H_
