"""Tests of tree_speculative_sampling_target_only (G3; docs/specs/tree_speculative_sampling.md).

CPU part: the NumPy reference reproduces the spec's known answers; the CUDA kernel compiles and
links through kernelcache for sm_90 and exports the expected schema; header discovery errors;
input validation that needs no GPU (the C++ entry points against the Python checks, message
for message), the custom op's mutation annotations and a torch.compile(fullgraph) trace with
fake CUDA tensors. GPU part (marked ``gpu``, skipped without a CUDA GPU):
known answers, randomized bitwise tests of the walk against the reference, the bonus token up to
a margin, a chi-squared lossless test, a cross-check against sglang-kernel 0.4.6's AOT op (G2),
malformed trees, >2^32-element offsets, bad inputs, fused vs split launches bit for bit, the
eager fast path vs the custom op, torch.compile and CUDA graphs (both launch shapes).
"""
from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.suite("kernels-gpu", "gpu-h200")]

from kernelcache.kernels.speculative_sampling import checks  # noqa: E402

from . import tree_sampling_reference as R  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
AOT_SO = REPO / ".device" / "aot" / "common_ops.abi3.so"
MARGIN_REL = 1e-5  # bonus token must match the reference unless u is this close (x total) to an edge


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# lazy: the string condition is evaluated at setup time, not at import
gpu = [pytest.mark.gpu, pytest.mark.kernel("tree_speculative_sampling"), pytest.mark.skipif("not _gpu_available()", reason="needs a CUDA GPU (torch.cuda.is_available() is False)")]


def _mark(*marks):
    def deco(f):
        for m in reversed(marks):
            f = m(f)
        return f

    return deco


requires_gpu = _mark(*gpu)


# =============================================================================================
# CPU: reference
# =============================================================================================
@pytest.mark.parametrize("gen", ["G1", "G2", "G3"])
def test_reference_known_answer_a(gen):
    inputs, expected = R.known_answer_a()
    out, _ = R.run_reference(inputs, 1.0, 1.0, gen)
    for k, v in expected["(1,1)"].items():
        np.testing.assert_array_equal(out[k], np.array(v), err_msg=f"{gen} (1,1) {k}")
    out, _ = R.run_reference(inputs, 0.0, 0.0, gen)
    want = expected["(0,0)G3"] if gen == "G3" else expected["(0,0)G12"]
    for k, v in want.items():
        np.testing.assert_array_equal(out[k], np.array(v), err_msg=f"{gen} (0,0) {k}")


@pytest.mark.parametrize("case", range(len(R.KNOWN_B)))
@pytest.mark.parametrize("gen", ["G1", "G2", "G3"])
def test_reference_known_answer_b(case, gen):
    inputs, ts, g12, g3 = R.known_answer_b(R.KNOWN_B[case])
    out, _ = R.run_reference(inputs, ts, 1.0, gen)
    assert (int(out["predicts"][0]), int(out["accept_token_num"][0])) == (g3 if gen == "G3" else g12)


def test_reference_lossless_monte_carlo():
    """Thresholds 1/1: the first emitted token follows the root target row (reference model)."""
    rng = np.random.default_rng(3)
    V = 6
    row = np.array([0.05, 0.3, 0.0, 0.15, 0.4, 0.1], dtype=np.float32)
    nxt, sib = R.kary_tree(4, 3)
    counts = np.zeros(V)
    trials = 20000
    for _ in range(trials):
        inp = dict(
            predicts=np.full(4, -1, np.int32), accept_index=np.full((1, 3), -1, np.int32),
            accept_token_num=np.zeros(1, np.int32), candidates=np.array([[0, 4, 1, 2]], np.int64),
            retrive_index=np.arange(4, dtype=np.int64)[None], retrive_next_token=nxt[None],
            retrive_next_sibling=sib[None], uniform_samples=rng.random((1, 4), dtype=np.float32),
            uniform_samples_for_final_sampling=rng.random(1, dtype=np.float32),
            target_probs=np.tile(row, (1, 4, 1)), draft_probs=np.zeros((1, 4, V), np.float32),
        )
        out, _ = R.run_reference(inp)
        counts[out["predicts"][0]] += 1
    _assert_chi2(counts, row.astype(np.float64))


def _assert_chi2(counts: np.ndarray, probs: np.ndarray, alpha_z: float = 4.0) -> None:
    """Pearson chi-squared goodness of fit; Wilson-Hilferty normal approximation, z < alpha_z."""
    probs = probs / probs.sum()
    n = counts.sum()
    assert counts[probs == 0].sum() == 0, f"tokens with zero probability emitted: {counts}"
    m = probs > 0
    exp = probs[m] * n
    obs = counts[m]
    small = exp < 5  # merge sparse categories into one bin
    if small.any():
        exp = np.append(exp[~small], exp[small].sum())
        obs = np.append(obs[~small], obs[small].sum())
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    df = int(exp.shape[0]) - 1
    if df <= 0:
        return
    z = ((chi2 / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    assert z < alpha_z, f"chi2={chi2:.1f} df={df} z={z:.2f}; counts={counts.tolist()} expected={exp.tolist()}"


# =============================================================================================
# CPU: build, schema, discovery, validation
# =============================================================================================
def test_import_is_light():
    code = (
        "import sys, kernelcache.kernels, kernelcache.kernels.speculative_sampling as s; "
        "s.spec(); print('torch' in sys.modules, 'tvm_ffi' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.split() == ["False", "False"], out.stdout + out.stderr


def _nvcc_available() -> bool:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    return os.path.isfile(os.path.join(home, "bin", "nvcc"))


@pytest.mark.skipif("not _nvcc_available()", reason="needs nvcc (CUDA toolkit) to compile")
def test_builds_for_sm90_and_schema_matches(monkeypatch):
    import kernelcache as kc
    from kernelcache.kernels import speculative_sampling as ss
    from tvm_ffi.core import TypeSchema

    monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "9.0")
    sp = ss.spec()
    assert sp.name == "tree_speculative_sampling" and sp.is_cuda
    mod = kc.load(sp)
    for fn, expected in ss.FUNCTIONS.items():
        found = str(TypeSchema.from_json_str(mod.get_function_metadata(fn)["type_schema"]))
        assert found == expected
    # host-only helpers run without a GPU
    assert mod["tree_speculative_sampling_workspace_numel"](2, 128256) == ss.workspace_numel(2, 128256) == 2 * (4 + 126)
    splits = mod["tree_speculative_sampling_num_splits"]
    for bs in (0, 1, 3, 8, 64, 131, 132, 263, 264, 1000):
        for V in (1, 3, 1024, 1025, 32000, 48000, 49152, 49153, 64000, 128256, 151936):
            for sms in (1, 78, 132):
                for eager in (False, True):
                    assert splits(bs, V, sms, eager) == ss.choose_num_splits(bs, V, sms, eager=eager), (bs, V, sms)
    assert list(mod["tree_speculative_sampling_launch_options"](-1, -1)) == [1, 48]


def test_flashinfer_include_discovery(monkeypatch, tmp_path):
    from kernelcache import ToolchainError
    from kernelcache.kernels import speculative_sampling as ss

    monkeypatch.setenv("KERNELCACHE_FLASHINFER_INCLUDE", str(tmp_path))
    with pytest.raises(ToolchainError, match="flashinfer/sampling.cuh"):
        ss.flashinfer_include_dir()
    (tmp_path / "flashinfer").mkdir()
    (tmp_path / "flashinfer" / "sampling.cuh").write_text("// stub\n")
    assert ss.flashinfer_include_dir() == str(tmp_path.resolve())
    monkeypatch.delenv("KERNELCACHE_FLASHINFER_INCLUDE")
    for name in [n for n in sys.modules if n == "flashinfer" or n.startswith("flashinfer.")]:
        monkeypatch.delitem(sys.modules, name)  # an earlier test of this process may have imported it
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "flashinfer" else real(n, *a))
    with pytest.raises(ToolchainError, match="pip install flashinfer-python"):
        ss.flashinfer_include_dir()
    assert "flashinfer" not in sys.modules  # never imported


def test_curand_include_discovery(monkeypatch, tmp_path):
    from kernelcache import ToolchainError
    from kernelcache.kernels import speculative_sampling as ss

    # a CUDA home as kernelcache.host.toolchain.find_cuda_home() accepts it (the toolkit that compiles)
    (tmp_path / "include").mkdir()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    (tmp_path / "include" / "cuda_runtime.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    (tmp_path / "include" / "curand.h").write_text("")
    assert ss.curand_include_dirs() == []
    (tmp_path / "include" / "curand.h").unlink()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "nvidia" else real(n, *a))
    with pytest.raises(ToolchainError, match="pip install nvidia-curand"):
        ss.curand_include_dirs()


def test_choose_num_splits():
    from kernelcache.kernels.speculative_sampling import choose_num_splits

    for bs in (1, 8, 16, 64, 256, 4096):
        for V in (3, 20, 32000, 128256, 151936):
            s = choose_num_splits(bs, V, 132)
            assert 1 <= s <= -(-V // 1024)
    assert choose_num_splits(1, 128256, 132) >= 126  # small batch: one block per 1024-entry chunk
    assert choose_num_splits(64, 128256, 132) == 5
    assert choose_num_splits(256, 128256, 132) == 1  # the batch fills the GPU: one fused launch
    assert choose_num_splits(256, 3, 132) == 1
    assert choose_num_splits(8, 32000, 132) == 32 and choose_num_splits(8, 32000, 132, eager=True) == 1
    assert choose_num_splits(8, 128256, 132, eager=True) == 33
    assert choose_num_splits(64, 48000, 132, eager=True) == 1 and choose_num_splits(8, 64000, 132, eager=True) == 33


def _np_inputs(bs=2, N=4, S=3, V=32):
    return R.make_inputs(np.random.default_rng(0), bs, N, S, V, tree="kary", k=2)


def _torch_inputs(device="cpu", **kw):
    import torch

    return {k: torch.from_numpy(v.copy()).to(device) for k, v in _np_inputs(**kw).items()}


def _call(t, ts=1.0, ta=1.0, det=True):
    from kernelcache.kernels.speculative_sampling import tree_speculative_sampling_target_only

    tree_speculative_sampling_target_only(*(t[k] for k in R.ARG_ORDER), ts, ta, det)


def _bad_cases(device):
    """(mutator, exception type, message regex) triples; all fail before any launch."""
    import torch

    def set_(k, f):
        def m(t):
            t[k] = f(t[k])
        return m

    return [
        (set_("target_probs", lambda x: x.double()), TypeError, "target_probs must be torch.float32"),
        (set_("candidates", lambda x: x.int()), TypeError, "candidates must be torch.int64"),
        (set_("predicts", lambda x: x.long()), TypeError, "predicts must be torch.int32"),
        (set_("accept_index", lambda x: x[:, :1].clone()[:0]), ValueError, "accept_index must have shape"),
        (set_("uniform_samples", lambda x: x[:, :-1].clone()), ValueError, "uniform_samples must have shape"),
        (set_("draft_probs", lambda x: x[..., :-1].clone()), ValueError, "draft_probs must have shape"),
        (set_("predicts", lambda x: x[:-1].clone()), ValueError, "predicts has .* needs at least"),
        (set_("target_probs", lambda x: x.transpose(0, 1).contiguous().transpose(0, 1)), ValueError, "must be contiguous"),
        (set_("draft_probs", lambda x: torch.empty_like(x).as_strided(x.shape, (x.shape[1] * x.shape[2], 1, x.shape[1]))), ValueError, "must be contiguous"),
        (set_("retrive_index", lambda x: x.reshape(-1)), ValueError, "retrive_index must be 2-D"),
        (set_("candidates", lambda x: np.zeros(3)), TypeError, "must be a torch.Tensor"),
    ]


@pytest.mark.parametrize("i", range(11))
def test_bad_inputs_cpu(i):
    t = _torch_inputs("cpu")
    mut, exc, msg = _bad_cases("cpu")[i]
    mut(t)
    with pytest.raises(exc, match=msg):
        _call(t)


@pytest.mark.parametrize("ts,ta", [(1.5, 1.0), (1.0, -0.1), (float("nan"), 1.0), (1.0, float("inf"))])
def test_bad_thresholds_cpu(ts, ta):
    t = _torch_inputs("cpu")
    with pytest.raises(ValueError, match=r"must be in \[0, 1\]"):
        _call(t, ts, ta)


def test_cpu_tensors_rejected_clearly():
    t = _torch_inputs("cpu")
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        _call(t)


def _noncontig(x):
    """A non-contiguous tensor with x's shape, dtype and values."""
    import torch

    if x.dim() >= 2 and x.shape[-1] > 1 and x.shape[-2] > 1:
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    big = torch.zeros(x.numel() * 2, dtype=x.dtype).view(*x.shape[:-1], x.shape[-1] * 2) if x.dim() else x
    y = big[..., ::2]
    y.copy_(x)
    return y


def _exhaustive_bad_cases():
    """(label, mutated argument list) for every check of the validation, one fault at a time."""
    import torch

    base = _torch_inputs("cpu", bs=2, N=4, S=3, V=32)
    names = list(R.ARG_ORDER)
    wrong_dtype = {torch.int32: [torch.int64, torch.float32, torch.uint8],
                   torch.int64: [torch.int32, torch.float64, torch.bool],
                   torch.float32: [torch.float64, torch.bfloat16, torch.float16, torch.int32]}
    cases = []

    def with_(i, x, label):
        args = [base[k] for k in names]
        args[i] = x
        cases.append((label, args))

    for i, k in enumerate(names):
        x = base[k]
        for dt in wrong_dtype[x.dtype]:
            with_(i, x.to(dt), f"{k} dtype {dt}")
        with_(i, x.unsqueeze(0), f"{k} ndim+1")
        if k != "predicts" and x.dim() >= 1:
            for d in range(x.dim()):
                shape = list(x.shape)
                shape[d] += 1
                with_(i, torch.zeros(shape, dtype=x.dtype), f"{k} shape[{d}]+1")
        if x.numel() > 1:
            with_(i, _noncontig(x), f"{k} non-contiguous")
    with_(0, base["predicts"][:-1].clone(), "predicts short")
    with_(0, base["predicts"].view(2, -1), "predicts 2-D")
    # N = 0, S = 0, V = 0 with bs > 0
    zero_n = _torch_inputs("cpu", bs=2, N=1, S=3, V=32)
    for k in ("candidates", "retrive_index", "retrive_next_token", "retrive_next_sibling", "uniform_samples"):
        zero_n[k] = zero_n[k][:, :0]
    for k in ("target_probs", "draft_probs"):
        zero_n[k] = zero_n[k][:, :0]
    cases.append(("N = 0", [zero_n[k] for k in names]))
    zero_s = dict(base)
    zero_s["accept_index"] = base["accept_index"][:, :0]
    cases.append(("S = 0", [zero_s[k] for k in names]))
    zero_v = dict(base)
    for k in ("target_probs", "draft_probs"):
        zero_v[k] = base[k][..., :0]
    cases.append(("V = 0", [zero_v[k] for k in names]))
    cases.append(("cpu tensors", [base[k] for k in names]))
    return cases


def _raised(fn, *args):
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - the test compares whatever comes out
        return type(e).__name__, str(e)
    return None


@pytest.mark.skipif("not _nvcc_available()", reason="needs nvcc (CUDA toolkit) to compile")
def test_cpp_validation_matches_python(monkeypatch):
    """The C++ entry points raise exactly the Python validation's exception (type and message),
    for every check, one fault at a time; no GPU needed (CPU tensors reach the C++ checks)."""
    import torch

    from kernelcache.kernels import speculative_sampling as ss
    from kernelcache.kernels.speculative_sampling import call as op

    monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "9.0")
    auto = op.function(op.AUTO_FN_NAME)
    explicit = op.function(op.FN_NAME)
    ws = torch.zeros(64, dtype=torch.int64)
    cases = _exhaustive_bad_cases()
    assert len(cases) > 60
    for label, args in cases:
        want = _raised(checks.validate, *args, 1.0, 1.0, True)
        assert want is not None and want[0] in ("TypeError", "ValueError"), (label, want)
        assert _raised(auto, *args, 1.0, 1.0, True) == want, label
        assert _raised(explicit, *args, 1.0, 1.0, True, ws, 1) == want, label
    # thresholds: the C++ check exists too (Python's comes first in the public API)
    args = cases[-1][1]
    assert "threshold_acc must be in [0, 1]" in _raised(auto, *args, 1.0, 1.5, True)[1]
    assert "threshold_single must be in [0, 1]" in _raised(auto, *args, float("nan"), 1.0, True)[1]
    # the public function on its fast path (enabled once the module is loaded) raises the same
    op.fast.enable()
    if op.env_allocator_available():
        assert op.fast.fn is not None
    for label, args in cases:
        want = _raised(checks.validate, *args, 1.0, 1.0, True)
        got = _raised(ss.tree_speculative_sampling_target_only, *args, 1.0, 1.0, True)
        assert got == want, label


def test_custom_op_mutation_annotations():
    """The torch op marks exactly the four written tensors as mutated (draft_probs included)."""
    import torch

    from kernelcache.kernels.speculative_sampling import call as op

    op.register_op()
    schema = torch.ops.kernelcache.tree_speculative_sampling_target_only.default._schema
    written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert written == ["predicts", "accept_index", "accept_token_num", "draft_probs"]
    assert [a.name for a in schema.arguments][:11] == list(R.ARG_ORDER)
    assert len(schema.returns) == 0


_COMPILE_TRACE = r"""
import sys, numpy as np, torch
from tests.kernels import tree_sampling_reference as R
from torch._subclasses.fake_tensor import FakeTensorMode
from kernelcache.kernels import tree_speculative_sampling_target_only as op

inputs = R.make_inputs(np.random.default_rng(0), 2, 4, 3, 32, tree="kary", k=2)
with FakeTensorMode():  # CUDA tensors without a GPU: tracing only
    t = {k: torch.empty(v.shape, dtype=getattr(torch, str(v.dtype)), device="cuda") for k, v in inputs.items()}
graphs = []
def backend(gm, example_inputs):
    graphs.append(gm)
    return gm
def f(t):
    op(*(t[k] for k in R.ARG_ORDER), 1.0, 0.5, False)
    return t["predicts"].sum()
torch.compile(f, fullgraph=True, backend=backend)(t)
code = graphs[0].code
print("CALLS", code.count("torch.ops.kernelcache.tree_speculative_sampling_target_only.default("))
print("ARGS", "1.0, 0.5, False)" in code)
# a bad input raises the Python validation's error at trace time
bad = dict(t)
with FakeTensorMode():
    bad["target_probs"] = torch.empty(2, 4, 32, dtype=torch.float64, device="cuda")
try:
    torch.compile(f, fullgraph=True, backend=backend)(bad)
except Exception as e:
    print("BAD", "target_probs must be torch.float32, got torch.float64" in str(e))
"""


def test_torch_compile_fullgraph_traces_custom_op_cpu():
    """torch.compile(fullgraph=True) traces the public function into one call of the custom op,
    also when the very first call of the process is being traced; no GPU (fake CUDA tensors)."""
    code = _COMPILE_TRACE
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.split()
    assert "CALLS" in lines and lines[lines.index("CALLS") + 1] == "1", out.stdout + out.stderr
    assert "ARGS True" in out.stdout and "BAD True" in out.stdout, out.stdout + out.stderr


# =============================================================================================
# GPU
# =============================================================================================
def _to_torch(inputs: dict):
    import torch

    return {k: torch.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in inputs.items()}


def _to_numpy(t: dict):
    return {k: v.cpu().numpy() for k, v in t.items()}


def _run_kernel(inputs: dict, ts=1.0, ta=1.0, det=True) -> dict:
    import torch

    t = _to_torch(inputs)
    _call(t, ts, ta, det)
    torch.cuda.synchronize()
    return _to_numpy(t)


def _compare(out: dict, ref: dict, infos, ctx: str, stats: dict | None = None) -> None:
    np.testing.assert_array_equal(out["accept_token_num"], ref["accept_token_num"], err_msg=ctx)
    np.testing.assert_array_equal(out["accept_index"], ref["accept_index"], err_msg=ctx)
    assert np.array_equal(out["draft_probs"].view(np.uint32), ref["draft_probs"].view(np.uint32)), ctx
    bonus_slots = {i.last for i in infos}
    p_out, p_ref = out["predicts"].copy(), ref["predicts"].copy()
    for b, info in enumerate(infos):
        if 0 <= info.last < p_out.shape[0]:
            got, want = int(p_out[info.last]), info.token
            near_edge = info.margin < MARGIN_REL * max(info.total, 1e-30)
            if stats is not None:
                stats["bonus"] = stats.get("bonus", 0) + 1
                stats["near_edge"] = stats.get("near_edge", 0) + int(near_edge)
            if got != want:
                assert near_edge, f"{ctx}: request {b} final token {got} != reference {want} (margin {info.margin:.3g}, total {info.total:.6g})"
                if stats is not None:
                    stats["edge_diff"] = stats.get("edge_diff", 0) + 1
    mask = np.ones(p_out.shape[0], dtype=bool)
    mask[[s for s in bonus_slots if 0 <= s < mask.shape[0]]] = False
    np.testing.assert_array_equal(p_out[mask], p_ref[mask], err_msg=ctx)


@requires_gpu
@pytest.mark.parametrize("det", [True, False])
def test_known_answer_a_gpu(det):
    inputs, expected = R.known_answer_a()
    for (ts, ta), key in (((1.0, 1.0), "(1,1)"), ((0.0, 0.0), "(0,0)G3")):
        out = _run_kernel(inputs, ts, ta, det)
        for k, v in expected[key].items():
            np.testing.assert_array_equal(out[k], np.array(v), err_msg=f"{key} {k}")


@requires_gpu
@pytest.mark.parametrize("case", range(len(R.KNOWN_B)))
def test_known_answer_b_gpu(case):
    inputs, ts, _g12, g3 = R.known_answer_b(R.KNOWN_B[case])
    out = _run_kernel(inputs, ts, 1.0)
    assert (int(out["predicts"][0]), int(out["accept_token_num"][0])) == g3


THRESHOLDS = [(ts, ta) for ts in (1.0, 0.5, 0.25, 0.0) for ta in (1.0, 0.5, 0.0)]
VOCABS = [3, 20, 32000, 128256, 151936]


def _configs(V: int, rng: np.random.Generator, count: int):
    trees = ["kary", "kary_shuffled", "chain", "root", "random"]
    targets = ["peaky", "uniform", "onehot", "sparse"]
    coins = ["rand", "edges", "zero", "rand"]
    big = V > 50000
    for i in range(count):
        tree = trees[i % len(trees)]
        bs = int(rng.choice([1, 3, 8, 16] if big else [1, 5, 16, 64]))
        if big and i == count - 1:
            bs = 64
        N = int(rng.choice([1, 4, 8, 16])) if tree != "root" else int(rng.choice([1, 4]))
        if tree == "random":
            N = int(rng.choice([8, 24]))
        S = int(rng.choice([1, 2, 4, 6, 8]))
        yield dict(bs=bs, N=N, S=S, V=V, tree=tree, k=int(rng.choice([1, 2, 3, 4])),
                   target=targets[(i // len(trees)) % len(targets)],
                   coin_mode=coins[(i // 3) % len(coins)],
                   cand_mode="sample" if i % 4 else "random")


@requires_gpu
@pytest.mark.parametrize("V", VOCABS)
@pytest.mark.parametrize("ts,ta", THRESHOLDS)
def test_random_vs_reference(V, ts, ta):
    rng = np.random.default_rng(hash((V, ts, ta)) % 2**32)
    count = 4 if V > 50000 else 10
    stats: dict = {}
    for i, cfg in enumerate(_configs(V, rng, count)):
        inputs = R.make_inputs(rng, **cfg)
        ref, infos = R.run_reference(inputs, ts, ta, "G3")
        for det in (True, False):
            out = _run_kernel(inputs, ts, ta, det)
            _compare(out, ref, infos, f"cfg={cfg} ts={ts} ta={ta} det={det}", stats)
    print(f"V={V} ts={ts} ta={ta}: {stats}")


@requires_gpu
@pytest.mark.parametrize("V", [20, 32000])
def test_repeatable_and_deterministic_modes(V):
    rng = np.random.default_rng(11)
    inputs = R.make_inputs(rng, 16, 8, 5, V, tree="kary", k=2, target="uniform")
    a = _run_kernel(inputs, det=True)
    b = _run_kernel(inputs, det=True)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


@requires_gpu
@pytest.mark.parametrize("V", [8, 32000])
def test_chi_squared_lossless(V):
    """Thresholds 1/1: the first emitted token ~ root row; the second token given that the first
    draft child was accepted ~ that child's row."""
    import torch

    rng = np.random.default_rng(5)
    N, S = 7, 3
    nxt, sib = R.kary_tree(N, 2)  # root -> 1,2 ; 1 -> 3,4 ; 2 -> 5,6
    base = R.make_target(rng, N, V, "peaky" if V > 8 else "uniform")
    base[:, V // 2] = 0  # an exact zero everywhere
    base = (base / base.sum(axis=1, keepdims=True)).astype(np.float32)
    cand = np.zeros(N, np.int64)
    order = np.argsort(-base[0])
    cand[1], cand[2] = order[0], order[3 % V]
    cand[3], cand[4] = np.argsort(-base[1])[:2]
    cand[5], cand[6] = np.argsort(-base[2])[:2]
    trials = 200000 if V <= 64 else 20000
    bs = trials
    t = {
        "predicts": torch.full((bs * N,), -1, dtype=torch.int32, device="cuda"),
        "accept_index": torch.full((bs, S), -1, dtype=torch.int32, device="cuda"),
        "accept_token_num": torch.zeros(bs, dtype=torch.int32, device="cuda"),
        "candidates": torch.from_numpy(cand).cuda().expand(bs, N).contiguous(),
        "retrive_index": torch.arange(bs * N, dtype=torch.int64, device="cuda").view(bs, N),
        "retrive_next_token": torch.from_numpy(nxt).cuda().expand(bs, N).contiguous(),
        "retrive_next_sibling": torch.from_numpy(sib).cuda().expand(bs, N).contiguous(),
        "uniform_samples": torch.rand(bs, N, device="cuda", generator=torch.Generator("cuda").manual_seed(1)),
        "uniform_samples_for_final_sampling": torch.rand(bs, device="cuda", generator=torch.Generator("cuda").manual_seed(2)),
    }
    if 2 * V * N * bs * 4 > torch.cuda.mem_get_info()[0] - 4 * 2**30:
        pytest.skip("not enough free GPU memory")
    t["target_probs"] = torch.from_numpy(base).cuda().expand(bs, N, V).contiguous()
    t["draft_probs"] = torch.zeros(bs, N, V, device="cuda")
    _call(t)
    first = t["predicts"].view(bs, N)[:, 0].cpu().numpy()
    _assert_chi2(np.bincount(first, minlength=V).astype(np.float64), base[0].astype(np.float64))
    # conditional on the first child (node 1) accepted: next token ~ row 1
    acc = t["accept_index"].cpu().numpy()
    sel = acc[:, 1] == (np.arange(bs) * N + 1)
    second = t["predicts"].view(bs, N)[:, 1].cpu().numpy()[sel]
    _assert_chi2(np.bincount(second, minlength=V).astype(np.float64), base[1].astype(np.float64))


def _aot_op():
    import torch

    if not AOT_SO.is_file():
        pytest.skip(f"AOT reference op not present ({AOT_SO}); it is unpacked into .device/aot/ by the GPU machine's packing step")
    if not hasattr(torch.ops.sgl_kernel, "tree_speculative_sampling_target_only"):
        torch.ops.load_library(str(AOT_SO))
    return torch.ops.sgl_kernel.tree_speculative_sampling_target_only.default


@requires_gpu
@pytest.mark.parametrize("V", [20, 32000, 128256])
@pytest.mark.parametrize("ts,ta", [(1.0, 1.0), (0.5, 1.0), (0.25, 0.5), (0.0, 1.0), (1.0, 0.5)])
def test_vs_aot_op(V, ts, ta):
    """AOT (sglang-kernel 0.4.6, G2) vs this kernel (G3): the AOT walk equals the G2 reference,
    ours equals the G3 reference, and the two agree wherever G2 and G3 agree."""
    import torch

    op = _aot_op()
    rng = np.random.default_rng(V + int(ts * 100) + int(ta * 1000))
    n_same = n_diff = 0
    for i in range(6):
        cfg = dict(bs=int(rng.choice([4, 16, 64])), N=8, S=5, V=V,
                   tree=["kary", "chain", "kary_shuffled"][i % 3], k=2,
                   target=["uniform", "peaky", "sparse"][i % 3],
                   coin_mode=["rand", "rand", "zero"][i % 3])
        inputs = R.make_inputs(rng, **cfg)
        ref3, inf3 = R.run_reference(inputs, ts, ta, "G3")
        ref2, inf2 = R.run_reference(inputs, ts, ta, "G2")
        t = _to_torch(inputs)
        op(*(t[k] for k in R.ARG_ORDER), ts, ta, True)
        torch.cuda.synchronize()
        aot = _to_numpy(t)
        ours = _run_kernel(inputs, ts, ta, True)
        ctx = f"cfg={cfg} ts={ts} ta={ta}"
        _compare(aot, ref2, inf2, "AOT vs G2 reference " + ctx)
        _compare(ours, ref3, inf3, "ours vs G3 reference " + ctx)
        for b in range(cfg["bs"]):
            same = (ref2["accept_token_num"][b] == ref3["accept_token_num"][b]
                    and np.array_equal(ref2["accept_index"][b], ref3["accept_index"][b])
                    and inf2[b].token == inf3[b].token)
            if same:
                n_same += 1
                assert np.array_equal(aot["accept_index"][b], ours["accept_index"][b]), ctx
            else:
                n_diff += 1
    print(f"V={V} ts={ts} ta={ta}: requests where G2==G3: {n_same}, documented G2/G3 differences: {n_diff}")


@requires_gpu
def test_malformed_trees_terminate_and_stay_in_bounds():
    import torch

    rng = np.random.default_rng(9)
    bs, N, S, V = 6, 8, 6, 64
    inputs = R.make_inputs(rng, bs, N, S, V, tree="kary", k=2, target="uniform", coin_mode="rand")
    nxt, sib, cand, ridx = (inputs[k] for k in ("retrive_next_token", "retrive_next_sibling", "candidates", "retrive_index"))
    sib[0, 1], sib[0, 2] = 2, 1  # sibling cycle
    nxt[1, :] = 0  # every node's first child is the root (next_token cycle)
    nxt[2, 0], sib[2, :] = 1, np.arange(1, N + 1)  # sibling chain running off the end (id N)
    nxt[3, 0], nxt[3, 1] = 1000, -7  # out-of-range child ids
    cand[4, 1:] = [V, -3, V + 100, 2**40, 5, 6, 7]  # out-of-range token ids
    ridx[5, [0, 1, 3]] = [2**40, -1, 10**6]  # slots outside predicts (others keep 5*N+i)
    for thr in ((1.0, 1.0), (0.0, 0.0)):
        ref, infos = R.run_reference(inputs, *thr, "G3")
        t = _to_torch(inputs)
        guard = 64
        big = torch.full((bs * N + 2 * guard,), -5, dtype=torch.int32, device="cuda")
        big[guard:-guard] = t["predicts"]
        t["predicts"] = big[guard:-guard]
        _call(t, *thr)
        torch.cuda.synchronize()  # would hang on an unbounded loop
        assert (big[:guard] == -5).all() and (big[-guard:] == -5).all()
        out = _to_numpy(t)
        _compare(out, ref, infos, f"malformed thr={thr}")


@requires_gpu
def test_offsets_past_2_pow_32():
    """bs*N*V > 2^32 elements: the last request's rows are reached with 64-bit offsets."""
    import torch

    free, _ = torch.cuda.mem_get_info()
    bs, N, S, V = 448, 64, 3, 151936
    need = 2 * bs * N * V * 4
    if free < need + 4 * 2**30:
        pytest.skip(f"needs {need / 2**30:.0f} GiB free GPU memory")
    assert bs * N * V > 2**32
    target = torch.full((bs, N, V), 1.0 / V, device="cuda")
    draft = torch.zeros_like(target)
    nxt = torch.tensor([[1, 2] + [-1] * (N - 2)], device="cuda").expand(bs, N).contiguous()
    sib = torch.full((bs, N), -1, dtype=torch.int64, device="cuda")
    cand = torch.zeros(bs, N, dtype=torch.int64, device="cuda")
    cand[:, 1], cand[:, 2] = 7, 150000
    b = bs - 1
    target[b, 0].zero_(); target[b, 0, 7] = 1.0       # accept node 1
    target[b, 1].zero_(); target[b, 1, 150000] = 1.0  # accept node 2 (bonus case, n = S-1)
    target[b, 2].zero_(); target[b, 2, 151935] = 1.0  # bonus token
    t = dict(
        predicts=torch.full((bs * N,), -1, dtype=torch.int32, device="cuda"),
        accept_index=torch.full((bs, S), -1, dtype=torch.int32, device="cuda"),
        accept_token_num=torch.zeros(bs, dtype=torch.int32, device="cuda"),
        candidates=cand, retrive_index=torch.arange(bs * N, device="cuda").view(bs, N),
        retrive_next_token=nxt, retrive_next_sibling=sib,
        uniform_samples=torch.full((bs, N), 0.5, device="cuda"),
        uniform_samples_for_final_sampling=torch.full((bs,), 0.5, device="cuda"),
        target_probs=target, draft_probs=draft,
    )
    _call(t)
    torch.cuda.synchronize()
    base = b * N
    assert t["accept_token_num"][b].item() == 2
    assert t["accept_index"][b].tolist() == [base, base + 1, base + 2]
    assert t["predicts"][base:base + 3].tolist() == [7, 150000, 151935]
    del target, draft, t
    torch.cuda.empty_cache()


@requires_gpu
def test_bad_inputs_gpu():
    import torch

    for i, (mut, exc, msg) in enumerate(_bad_cases("cuda")):
        t = _torch_inputs("cuda")
        mut(t)
        with pytest.raises(exc, match=msg):
            _call(t)
    t = _torch_inputs("cuda")
    t["draft_probs"] = t["draft_probs"].cpu()
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        _call(t)
    t = _torch_inputs("cuda")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        _call(t, 1.0001, 1.0)
    # device mismatch (CUDA vs CPU) raised identically by the C++ entry point and Python
    from kernelcache.kernels.speculative_sampling import call as op

    for k in ("predicts", "target_probs", "draft_probs", "uniform_samples_for_final_sampling"):
        t = _torch_inputs("cuda")
        t[k] = t[k].cpu()
        args = [t[n] for n in R.ARG_ORDER]
        want = _raised(checks.validate, *args, 1.0, 1.0, True)
        assert want is not None and want[0] == "ValueError", want
        assert _raised(op.function(op.AUTO_FN_NAME), *args, 1.0, 1.0, True) == want, k
        assert _raised(_call, t) == want, k
    # the raw tvm-ffi function validates too (errors, never a launch)
    fn = op.function(op.FN_NAME)
    t = _torch_inputs("cuda")
    args = [t[k] for k in R.ARG_ORDER]
    with pytest.raises(ValueError, match="workspace has"):
        fn(*args, 1.0, 1.0, True, torch.empty(1, dtype=torch.int64, device="cuda"), 1)
    with pytest.raises(ValueError, match="num_splits"):
        fn(*args, 1.0, 1.0, True, torch.empty(100, dtype=torch.int64, device="cuda"), 0)
    with pytest.raises(ValueError, match="needs at least"):
        fn(*[args[0][:1], *args[1:]], 1.0, 1.0, True, torch.empty(100, dtype=torch.int64, device="cuda"), 1)
    with pytest.raises(ValueError, match="threshold_acc"):
        fn(*args, 1.0, 2.0, True, torch.empty(100, dtype=torch.int64, device="cuda"), 1)
    torch.cuda.synchronize()


def _call_raw(t, splits, ts=1.0, ta=1.0, det=True):
    """The explicit tvm-ffi entry point: a given split count (1: the fused kernel)."""
    import torch

    from kernelcache.kernels.speculative_sampling import call as op

    bs, V = t["candidates"].shape[0], t["target_probs"].shape[2]
    ws = torch.empty(max(op.workspace_numel(bs, V), 1), dtype=torch.int64, device="cuda")
    op.function(op.FN_NAME)(*(t[k] for k in R.ARG_ORDER), ts, ta, det, ws, splits)


@requires_gpu
@pytest.mark.parametrize("V", [3, 20, 1000, 32000, 128256])
def test_fused_and_split_paths_agree(V):
    """One fused launch (one split) and the two-kernel path with any split count give the same
    bits, equal to the reference; so does the public function (its own choice) and the op."""
    import torch

    rng = np.random.default_rng(V)
    chunks = -(-V // 1024)
    for i, cfg in enumerate(_configs(V, rng, 4)):
        inputs = R.make_inputs(rng, **cfg)
        ts, ta = THRESHOLDS[(i * 5) % len(THRESHOLDS)]
        ref, infos = R.run_reference(inputs, ts, ta, "G3")
        outs = {}
        for det in (True, False):
            for splits in sorted({1, 2, 5, chunks, chunks + 3}):
                t = _to_torch(inputs)
                _call_raw(t, splits, ts, ta, det)
                torch.cuda.synchronize()
                outs[(det, splits)] = _to_numpy(t)
            t = _to_torch(inputs)
            _call(t, ts, ta, det)
            outs[(det, "public")] = _to_numpy(t)
            t = _to_torch(inputs)
            from kernelcache.kernels.speculative_sampling import call as op

            op.register_op()(*(t[k] for k in R.ARG_ORDER), ts, ta, det)
            outs[(det, "op")] = _to_numpy(t)
        ctx = f"cfg={cfg} ts={ts} ta={ta}"
        first = outs[(True, 1)]
        _compare(first, ref, infos, "fused " + ctx)
        for key, out in outs.items():
            for k in first:
                a, b = out[k], outs[(key[0], 1)][k]
                assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"{key} {k} {ctx}"


@requires_gpu
def test_fast_path_is_taken_and_other_routes_use_the_op():
    """Eager calls with plain tensors take the direct tvm-ffi call (when torch exposes its DLPack
    C exchange API); under a dispatch mode the call goes through the custom op; same results."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from kernelcache.kernels import speculative_sampling as ss
    from kernelcache.kernels.speculative_sampling import call as op

    inputs = R.make_inputs(np.random.default_rng(8), 4, 8, 4, 32000, tree="kary", k=2, target="peaky")
    ref, infos = R.run_reference(inputs)
    out = _run_kernel(inputs)
    _compare(out, ref, infos, "fast path")
    if not op.env_allocator_available():
        pytest.skip("torch has no DLPack C exchange API here: calls take the general path")
    assert op.fast.fn is not None

    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    t = _to_torch(inputs)
    with Log():
        _call(t)
    torch.cuda.synchronize()
    assert any("kernelcache.tree_speculative_sampling_target_only" in f for f in seen), seen
    _compare(_to_numpy(t), ref, infos, "dispatch mode")
    # int thresholds / a bool-like deterministic take the general path, same result
    t = _to_torch(inputs)
    ss.tree_speculative_sampling_target_only(*(t[k] for k in R.ARG_ORDER), 1, 1, 1)
    _compare(_to_numpy(t), ref, infos, "int arguments")


@requires_gpu
def test_empty_batch_is_noop():
    inputs = R.make_inputs(np.random.default_rng(0), 0, 4, 3, 32)
    out = _run_kernel(inputs)
    assert out["predicts"].size == 0


def _host_c_compiler_works() -> bool:
    """torch.compile's Triton backend compiles a launcher with $CC; a serving host may have none."""
    import os
    import shutil
    import subprocess

    cc = shutil.which(os.environ.get("CC", "cc") or "cc")
    try:
        return bool(cc) and subprocess.run([cc, "--version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@requires_gpu
@pytest.mark.skipif("not _host_c_compiler_works()",
                    reason="torch.compile (Triton) needs a working host C compiler ($CC); none on this host")
def test_torch_compile_and_cuda_graph():
    import torch

    from kernelcache.kernels.speculative_sampling import tree_speculative_sampling_target_only as op

    rng = np.random.default_rng(21)
    inputs = R.make_inputs(rng, 8, 8, 4, 32000, tree="kary", k=2, target="peaky")
    ref, infos = R.run_reference(inputs)

    def f(t):
        op(*(t[k] for k in R.ARG_ORDER), 1.0, 1.0, True)
        return t["predicts"].sum()

    t = _to_torch(inputs)
    torch.compile(f, fullgraph=True)(t)
    torch.cuda.synchronize()
    _compare(_to_numpy(t), ref, infos, "torch.compile")

    # CUDA graph: capture once, refill inputs, replay
    static = _to_torch(inputs)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        f(static)  # warm-up (module load, op registration) outside capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    for k in ("predicts", "accept_index"):
        static[k].fill_(-1)
    static["draft_probs"].zero_()
    with torch.cuda.graph(g):
        f(static)
    inputs2 = R.make_inputs(rng, 8, 8, 4, 32000, tree="kary_shuffled", k=2, target="uniform")
    ref2, infos2 = R.run_reference(inputs2)
    for k, v in inputs2.items():
        static[k].copy_(torch.from_numpy(v))
    g.replay()
    torch.cuda.synchronize()
    _compare(_to_numpy(static), ref2, infos2, "cuda graph replay")

    # both launch shapes captured: the split path (workspace allocated during capture, from the
    # graph's pool) and the fused kernel (no workspace), captured first thing on a fresh shape
    for bs, V in ((3, 128256), (300, 1000)):
        a = R.make_inputs(rng, bs, 6, 4, V, tree="kary", k=2, target="peaky")
        b = R.make_inputs(rng, bs, 6, 4, V, tree="chain", k=1, target="sparse")
        static = _to_torch(a)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            op(*(static[k] for k in R.ARG_ORDER), 1.0, 1.0, True)
        for inp in (a, b, a):
            ref, infos = R.run_reference(inp)
            for k, v in inp.items():
                static[k].copy_(torch.from_numpy(v))
            g.replay()
            torch.cuda.synchronize()
            _compare(_to_numpy(static), ref, infos, f"cuda graph bs={bs} V={V}")
        del g, static
    torch.cuda.synchronize()
