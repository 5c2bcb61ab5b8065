#include "draft.h"

#include <cstring>
#include <stdexcept>

namespace kcng {

size_t next_bucket_count(size_t current) {
  // libstdc++ (GCC 12) bucket counts of a unique-key hashtable growing one insertion at a time.
  static const size_t kSeq[] = {13,     29,     59,     127,     257,     541,     1109,    2357,
                                5087,   10273,  20753,  42043,   85229,   172933,  351061,  712697,
                                1447153, 2938679, 5967347, 12117689};
  for (size_t v : kSeq) {
    if (v > current) return v;
  }
  throw std::runtime_error("draft tree too large");
}

void assemble(const DraftTree& tree, int32_t n, DraftResult* out, std::vector<int32_t>* queue) {
  out->tokens.clear();
  out->parents.clear();
  out->tokens.reserve(static_cast<size_t>(n));
  out->parents.reserve(static_cast<size_t>(n));
  out->tokens.push_back(tree.node(0).token);
  out->parents.push_back(-1);
  auto& q = *queue;
  q.clear();
  q.push_back(0);  // draft node ids; output index of q[i] is i
  for (size_t head = 0; head < q.size() && static_cast<int32_t>(out->tokens.size()) < n; ++head) {
    const int32_t u = q[head];
    for (int32_t v : tree.node(u).kids) {
      if (static_cast<int32_t>(out->tokens.size()) >= n) break;
      out->tokens.push_back(tree.node(v).token);
      out->parents.push_back(static_cast<int32_t>(head));
      q.push_back(v);
    }
  }
  out->real = static_cast<int32_t>(out->tokens.size());
  while (static_cast<int32_t>(out->tokens.size()) < n) {
    out->tokens.push_back(0);
    out->parents.push_back(0);
  }
}

void write_result(const DraftResult& r, int32_t n, int64_t* ids, int64_t* mask) {
  const size_t nn = static_cast<size_t>(n);
  for (size_t i = 0; i < nn; ++i) ids[i] = r.tokens[i];
  std::memset(mask, 0, nn * nn * sizeof(int64_t));
  mask[0] = 1;
  for (size_t i = 1; i < nn; ++i) {
    const size_t p = static_cast<size_t>(r.parents[i]);
    int64_t* row = mask + i * nn;
    const int64_t* prow = mask + p * nn;
    for (size_t j = 0; j <= p; ++j) row[j] = prow[j];
    row[i] = 1;
  }
}

// Leaf paths of a result's real rows, in index order (each path as a list of row indices,
// depth 1 first), appended to `paths` as [len, idx...] records.
static void leaf_paths(const DraftResult& r, std::vector<int32_t>* rec, std::vector<int32_t>* tmp) {
  const int32_t real = r.real;
  std::vector<int32_t>& has_child = *tmp;
  has_child.assign(static_cast<size_t>(real), 0);
  for (int32_t i = 1; i < real; ++i) has_child[static_cast<size_t>(r.parents[static_cast<size_t>(i)])] = 1;
  for (int32_t i = 1; i < real; ++i) {
    if (has_child[static_cast<size_t>(i)]) continue;
    size_t start = rec->size();
    rec->push_back(0);
    for (int32_t v = i; v > 0; v = r.parents[static_cast<size_t>(v)]) rec->push_back(r.tokens[static_cast<size_t>(v)]);
    std::reverse(rec->begin() + static_cast<std::ptrdiff_t>(start) + 1, rec->end());
    (*rec)[start] = static_cast<int32_t>(rec->size() - start - 1);
  }
}

void merge_results(const DraftResult& primary, const DraftResult& secondary, int32_t n, DraftTree* tree,
                   DraftResult* out, std::vector<int32_t>* scratch) {
  std::vector<int32_t> rec;
  std::vector<int32_t> tmp;
  leaf_paths(primary, &rec, &tmp);
  leaf_paths(secondary, &rec, &tmp);
  tree->reset(primary.tokens[0]);
  const int32_t budget = n - 1;
  size_t pos = 0;
  bool full = false;
  while (pos < rec.size() && !full) {
    const int32_t len = rec[pos];
    int32_t cur = 0;
    for (int32_t i = 0; i < len; ++i) {
      const int32_t tok = rec[pos + 1 + static_cast<size_t>(i)];
      int32_t c = tree->find(cur, tok);
      if (c < 0) {
        if (tree->size() >= budget) {
          full = true;
          break;
        }
        c = tree->add(cur, tok);
      }
      cur = c;
    }
    pos += 1 + static_cast<size_t>(len);
  }
  assemble(*tree, n, out, scratch);
}

}  // namespace kcng
