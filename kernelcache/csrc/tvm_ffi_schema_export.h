// Pre-included (-include) by kernelcache into a tvm-ffi module's C++/CUDA translation units that
// use TVM_FFI_DLL_EXPORT_TYPED_FUNC. It exports the same __tvm_ffi__metadata_<name> function,
// returning the same JSON, as tvm-ffi's own macro under TVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1,
// which kernelcache needs: every load compares each function's exported type schema with the
// one the spec declares, so a stale or foreign binary is refused before it can be called.
//
// Why not tvm-ffi's macro as shipped: it escapes the schema through an inline std::ostringstream
// chain in every exporting function, whose code generation is ~10% of a tiny module's compile
// (0.08-0.10 s of g++ -O2 time). Here the schema string still comes from tvm-ffi's own
// FunctionInfo<F>::TypeSchema() (so the types are named exactly as tvm-ffi names them); only
// the JSON wrapping and escaping is one out-of-line loop over a C buffer, generated once per
// translation unit: 0.02-0.03 s where the shipped macro costs 0.09 s (g++ 12, -O2).
//
// A caller who opted out of metadata (-UTVM_FFI_DLL_EXPORT_INCLUDE_METADATA) keeps the opt-out.
#ifndef KERNELCACHE_TVM_FFI_SCHEMA_EXPORT_H_
#define KERNELCACHE_TVM_FFI_SCHEMA_EXPORT_H_

#include <tvm/ffi/function.h>

#if TVM_FFI_DLL_EXPORT_INCLUDE_METADATA
#include <cstdlib>
#include <cstring>
#include <string>

namespace kernelcache_schema_export {

// {"type_schema":"<schema, JSON-escaped as tvm-ffi's EscapeStringJSON does>"} as a tvm-ffi
// string (allocated by libtvm_ffi). Plain C buffers: std::string appends cost as much
// compile time as the ostringstream this replaces.
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

// The schema string itself is tvm-ffi's (FunctionInfo<F>::TypeSchema), so the types are named
// exactly as tvm-ffi names them; out of line, once per exported function type.
template <class F>
[[gnu::noinline]] int Export(TVMFFIAny* result) {
  const std::string schema = ::tvm::ffi::detail::FunctionInfo<F>::TypeSchema();
  return Metadata(schema.data(), schema.size(), result);
}

}  // namespace kernelcache_schema_export

#undef TVM_FFI_DLL_EXPORT_TYPED_FUNC
#define TVM_FFI_DLL_EXPORT_TYPED_FUNC(ExportName, Function)                                      \
  TVM_FFI_DLL_EXPORT_TYPED_FUNC_IMPL_(ExportName, Function)                                      \
  extern "C" {                                                                                   \
  TVM_FFI_DLL_EXPORT int __tvm_ffi__metadata_##ExportName(void* self, const TVMFFIAny* args,     \
                                                          int32_t num_args, TVMFFIAny* result) { \
    TVM_FFI_SAFE_CALL_BEGIN();                                                                   \
    return ::kernelcache_schema_export::Export<std::decay_t<decltype(Function)>>(result);       \
    TVM_FFI_SAFE_CALL_END();                                                                     \
  }                                                                                              \
  }
#endif  // TVM_FFI_DLL_EXPORT_INCLUDE_METADATA

#endif  // KERNELCACHE_TVM_FFI_SCHEMA_EXPORT_H_
