"""The property: selection never skips a test whose outcome a change can alter.

On the generated project (:mod:`.gen_project`, with a vendored library as a git submodule:
:mod:`.submodule_project`), random edits from fixed seeds — modify (a number or a comment in a
source, header, ``.cuh``/``.cu``, data file, helper, spec module, test, doc), rename, delete,
add (a shadowing header, a new test, a stray file), restore an old version, bump the submodule
to another tag, edit, add or commit a file inside the submodule — with partial re-recording
runs of the map in between (some from a dirty tree, some not loading every kernel). For each edit the selection (``kernelcache.impact.api.affected``,
the path the CLI and ``ci/affected-tests`` take; every few edits the plugin's too) is compared
with a real full run: every test whose outcome differs from the full run at the base commit
(outcome and assertion message), and every test file that no longer collects, was selected.
0 missed, over 200+ edits.

Cheap by design: kernels are C-ABI functions (a rebuild is a fraction of a second), full runs
fork from a zygote with pytest, tvm-ffi, the loader's modules and pytest's default plugins
imported and the heap frozen (``gc.freeze``: pytest's end-of-session ``gc.collect`` no longer
walks torch's objects), without plugin autoloading; a full run is ~0.3 s. An edit that selects
everything is reverted without a full run (everything covers any outcome change). 208 edits
took 169-235 s at ``-n 2`` (load 2-5; benchmarks/RESULTS.md "Issue 22 (rerun)").
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from kernelcache.impact import witness
from kernelcache.impact.api import affected

from .env_project import ENV_TESTS, Environment, env_files
from .gen_project import ALL, UNDECLARED_FILES, UNDECLARED_TESTS, Project, git
from .scope_project import PYPROJECT, SCOPE_FILES, SCOPED_TESTS
from .submodule_project import SUB, SUB_FILES, SUB_TESTS, TAGS, checkout, make_project, reset_hard, sub_worktree

FILES = {**SUB_FILES, **UNDECLARED_FILES}  # and a kernel no specs module declares (loaded in its test)
# and kernels loaded by fixtures of every scope and at module import, a conftest's import-time read,
# subprocess tests (one declaring its input): scope_project
FILES.update({**SCOPE_FILES, "pyproject.toml": PYPROJECT})

SEEDS = (11, 22, 33, 44, 55, 66)
SCOPE_WORDS = ("kern_e", "kern_f", "kern_g", "kern_h", "scoped", "conftest_golden", "mod_value", "sub_input")
EDITS_PER_SEED = 52
_NUMBER = re.compile(r"\d+")

NEW_TESTS = [
    "import pytest\n\n\n@pytest.mark.kernel('ka')\ndef test_new(kernelcache_module):\n"
    "    assert kernelcache_module('ka').fa(2) == 113\n",
    "import kernelcache as kc\nfrom kspecs import spec_c\n\n\ndef test_new():\n    assert kc.load(spec_c()).fc(0) == 3\n",
    "from pathlib import Path\n\n\ndef test_new():\n"
    "    assert (Path(__file__).resolve().parents[1] / 'docs' / 'notes.md').read_text().startswith('# Notes')\n",
    "import pyutil2\n\n\ndef test_new():\n    assert pyutil2.EXTRA == 1\n",
]
NEW_SCOPED_TESTS = [  # under tests/scoped/: the session and package fixtures of its conftest
    "def test_new(kern_e):\n    assert kern_e.fe(3) == 53\n",
    "def test_new(kern_f, golden):\n    assert kern_f.ff(0) + golden == 67\n",
]
SUB_STRAY = ["include/minilib/extra.h", "notes.txt"]  # inside the submodule
STRAY = ["csrc/kern_a/shared.h", "csrc/kern_a/a_extra.h", "csrc/kern_b/b_extra.h", "csrc/kern_c/notes.txt",
         "csrc/common/unused.h", "csrc/kern_c/minilib/clamp.h", "data/extra.json", "docs/more.md", "tests/data.txt",
         "pyutil/extra.py"]


def outcome_key(o: tuple[str, str]) -> tuple[str, str]:
    """Outcome, and the assertion message of a failure (values the test saw); error texts may
    name temporary paths, so only their kind counts."""
    return (o[0], o[1] if o[0] == "FAILED" else "")


class Editor:
    def __init__(self, proj: Project, rng: random.Random, initial: str):
        self.p = proj
        self.rng = rng
        self.initial = initial
        self.n_new = 0

    def files(self) -> list[str]:
        return [f for f in git(self.p.path, "ls-files").split("\n") if f and (self.p.path / f).is_file()]

    def apply(self) -> str:
        """One random edit to the working tree; returns its description."""
        for _ in range(20):
            kind = self.rng.choices(["number", "comment", "rename", "delete", "add", "restore", "conftest",
                                     "bump", "inside"], [40, 12, 9, 9, 16, 12, 2, 5, 9])[0]
            did = getattr(self, f"_{kind}")()
            if did:
                return did
        return self._comment() or "nothing"

    def _pick(self, pred=lambda f: True) -> str | None:
        cands = [f for f in self.files() if pred(f) and f not in ("pyproject.toml", ".gitignore", ".gitmodules")]
        return self.rng.choice(cands) if cands else None

    def _number(self) -> str | None:
        f = self._pick(lambda f: not f.endswith("conftest.py"))
        if f is None:
            return None
        text = (self.p.path / f).read_text()
        ms = list(_NUMBER.finditer(text))
        if not ms:
            return None
        m = self.rng.choice(ms)
        new = str(int(m.group(0)) + self.rng.choice([1, 2]))
        (self.p.path / f).write_text(text[:m.start()] + new + text[m.end():])
        return f"number in {f}: {m.group(0)} -> {new}"

    def _comment(self) -> str | None:
        f = self._pick(lambda f: not f.endswith("conftest.py"))
        if f is None:
            return None
        mark = {".py": "# touched\n", ".cc": "// touched\n", ".h": "// touched\n", ".cuh": "// touched\n",
                ".cu": "// touched\n", ".md": "touched\n"}.get(Path(f).suffix, "\n")
        with open(self.p.path / f, "a") as fh:
            fh.write(mark)
        return f"comment in {f}"

    def _rename(self) -> str | None:
        f = self._pick(lambda f: not f.endswith("conftest.py"))
        if f is None:
            return None
        stem, dot, ext = f.rpartition(".")
        new = f"{stem}_r.{ext}" if dot else f + "_r"
        git(self.p.path, "mv", f, new)
        if self.rng.random() < 0.5 and ext in ("h", "cuh", "cu"):  # keep the includers building
            old_name, new_name = f.rpartition("/")[2], new.rpartition("/")[2]
            for g in self.files():
                if g.startswith("csrc/"):
                    t = (self.p.path / g).read_text()
                    if f'"{old_name}"' in t or f'/{old_name}"' in t:
                        (self.p.path / g).write_text(t.replace(old_name + '"', new_name + '"'))
        return f"rename {f} -> {new}"

    def _delete(self) -> str | None:
        f = self._pick(lambda f: not f.endswith("conftest.py"))
        if f is None:
            return None
        (self.p.path / f).unlink()
        return f"delete {f}"

    def _add(self) -> str | None:
        if self.rng.random() < 0.35:
            self.n_new += 1
            scoped = self.rng.random() < 0.3
            rel = f"tests/{'scoped/' if scoped else ''}test_new{self.n_new}.py"
            self.p.write(rel, self.rng.choice(NEW_SCOPED_TESTS if scoped else NEW_TESTS))
            return f"add {rel}"
        rel = self.rng.choice(STRAY)
        if (self.p.path / rel).exists():
            return None
        body = {"csrc/kern_a/shared.h": "#define SHARED_VALUE 200\n", "csrc/kern_a/a_extra.h": "#define A_EXTRA 5\n",
                "csrc/kern_c/minilib/clamp.h": "#define MINILIB_CLAMP 4\n",
                "pyutil/extra.py": "X = 1\n"}.get(rel, "new\n")
        self.p.write(rel, body)
        return f"add {rel}"

    def _restore(self) -> str | None:
        f = self.rng.choice(sorted(FILES))
        cur = self.p.path / f
        if cur.exists() and cur.read_text() == FILES[f]:
            return None
        git(self.p.path, "checkout", self.initial, "--", f)
        return f"restore {f}"

    def _bump(self) -> str | None:
        """The submodule checked out at another tag (what a bump commit records)."""
        tag = self.rng.choice(sorted(TAGS))
        checkout(self.p.path / SUB, tag)
        return f"bump {SUB} to {tag}"

    def _inside(self) -> str | None:
        """A file inside the submodule modified or added in its working tree, sometimes
        committed there (the superproject then sees its gitlink move to a commit no tag names)."""
        sub = self.p.path / SUB
        if self.rng.random() < 0.3:
            rel = self.rng.choice(SUB_STRAY)
            if (sub / rel).exists():
                return None
            self.p.write(f"{SUB}/{rel}", "#define MINILIB_CLAMP 5\n" if rel.endswith(".h") else "new\n")
            did = f"add {SUB}/{rel}"
        else:
            rel = self.rng.choice(["include/minilib/clamp.h", "VERSION"])
            text = (sub / rel).read_text()
            new = str(int(_NUMBER.search(text).group(0)) + self.rng.choice([1, 2]))
            self.p.write(f"{SUB}/{rel}", _NUMBER.sub(new, text, count=1))
            did = f"number in {SUB}/{rel} -> {new}"
        if self.rng.random() < 0.4:
            git(sub, "add", "-A")
            git(sub, "commit", "-q", "-m", did)
            did += " (committed in the submodule)"
        return did

    def _conftest(self) -> str | None:
        self.p.write("tests/conftest.py", (self.p.path / "tests/conftest.py").read_text() + "# touched\n")
        return "conftest"


def required(base: dict, now: dict) -> set[str]:
    """Node ids (or test files that no longer collect) whose outcome the edit changed."""
    out = set()
    for n in set(base) | set(now):
        if n not in now:
            continue  # gone: deleted or renamed (its file's collection error is its own entry)
        if n not in base or outcome_key(now[n]) != outcome_key(base[n]):
            out.add(n)
    return out


def covered(n: str, res: dict, recorded: set[str] = frozenset()) -> bool:
    """``n`` runs: selected by name, in a new test file, a file that no longer collects, or a test
    id the map never recorded (a new parameter) in a file that runs — the plugin selects every
    test the map does not know (``select.Selector.reason``)."""
    if res["everything"]:
        return True
    f = n.split("::", 1)[0]
    return n in res["selected"] or f in res["new_files"] or ("::" not in n and f in res["files"]) or \
        (n not in recorded and f in res["files"]) or \
        ("::" not in n and any(g.startswith(n + "/") for g in res["files"]))  # a directory's conftest failed


def check_witnesses(proj, selection: dict, where: tuple) -> None:
    """Every deselected test has a witness, and each verifies (``affected --verify``'s replay) on
    the tree and environment it was made on. (Whether the change is disjoint from it is what the
    full run above checks: a record sees the changes since the commit it was recorded at, so the
    selection's ``changed`` union is not one test's change.)"""
    w = selection["witness"]
    assert set(w["tests"]) == set(selection["deselected"]), where
    assert witness.verify(w, proj.path) == [], where


def back_to_base(proj: Project, env: Environment, state: tuple) -> None:
    """Back to the state the reference run (``base_out``) was measured on: the base commit, the
    submodule's uncommitted changes (a superproject commit leaves them; a checkout alone drops
    them, and the next edit would then be compared with a run of another tree) and the installed
    environment."""
    base, sub_tree, version = state
    reset_hard(proj, base, sub_tree)
    env.install(version)
    assert sub_worktree(proj) == sub_tree


@pytest.mark.parametrize("seed", SEEDS)
def test_no_outcome_change_is_ever_deselected(seed, tmp_path, zygote, monkeypatch):
    rng = random.Random(seed)
    env = Environment(tmp_path)  # a header wheel upgraded now and then: the environment is an input
    monkeypatch.syspath_prepend(str(env.site))  # selection runs where the tests run (they import from it)
    proj = make_project(tmp_path, zygote, {**FILES, **env_files(env.site)})
    warm = proj.pytest()  # the map is recorded on a warm cache: kd's load in its test is recalled
    assert warm.rc == 0, warm.out
    first = proj.record()
    assert first.rc == 0 and set(first.summary) == ALL | SUB_TESTS | UNDECLARED_TESTS | SCOPED_TESTS | ENV_TESTS, first.out
    ed = Editor(proj, rng, proj.head())
    base_out = first.summary
    cache = tmp_path / "import-facts.json"
    stats = {"edits": 0, "changed": 0, "everything": 0, "deselected": 0, "plugin_checked": 0, "session_broken": 0,
             "submodule": 0, "crashed": 0, "undeclared": 0, "scoped": 0, "environment": 0, "witnessed": 0}
    for i in range(EDITS_PER_SEED):
        base = proj.head()
        state = (base, sub_worktree(proj), env.version)  # what base_out was measured on
        what = env.upgrade(rng) if rng.random() < 0.06 else ed.apply()
        if rng.random() < 0.5:
            proj.commit(what)
        res = affected(proj.path, base, proj.map, graph_cache=cache, witnesses=True)
        print(f"edit {i}: {what}")  # shown with a failure: the sequence that led to it
        stats["edits"] += 1
        stats["submodule"] += SUB in what
        stats["undeclared"] += "kern_d" in what or "test_d" in what
        stats["scoped"] += any(w in what for w in SCOPE_WORDS)
        stats["environment"] += what.startswith("environment:")
        if res["everything"]:
            stats["everything"] += 1
            back_to_base(proj, env, state)  # everything covers any change
            continue
        check_witnesses(proj, res, (seed, i, what))  # every deselection of every edit, verified on this tree
        stats["witnessed"] += res["n_deselected"]
        full = proj.pytest()
        if not full.summary and full.rc < 0:  # a kernel crashed the process (`return 1` in the export macro)
            left = [n for n in base_out if "::" in n and not covered(n, res) and (proj.path / n.split("::")[0]).exists()]
            rest = proj.pytest(*left) if left else None  # what selection left out runs as it did
            assert rest is None or (rest.rc >= 0 and set(rest.summary) >= set(left) and
                                    not required({n: base_out[n] for n in left}, rest.summary)), (seed, i, what, left)
            stats["crashed"] += 1
            back_to_base(proj, env, state)
            continue
        if not full.summary:  # the session itself fails (specs module broken): nothing can pass silently
            assert full.rc not in (0, 5), (seed, i, what, full.out[-2000:])
            plug = proj.affected(base, "--collect-only")
            assert plug.rc not in (0, 5), (seed, i, what, plug.out[-2000:])
            stats["session_broken"] += 1
            back_to_base(proj, env, state)
            continue
        if i % 6 == 0:  # the plugin decides the same per collected test
            plug = proj.affected(base, "--collect-only")
            assert plug.selection, (seed, i, what, plug.out[-2000:])
            collected = set(plug.selection["selected"]) | set(plug.selection["deselected"])
            assert set(res["selected"]) & collected <= set(plug.selection["selected"]), (seed, i, what)
            check_witnesses(proj, plug.selection, (seed, i, what))
            stats["plugin_checked"] += 1
        need = required(base_out, full.summary)
        recorded = set(json.loads(proj.map.read_text())["tests"])
        missed = {n for n in need if not covered(n, res, recorded)}
        assert not missed, (seed, i, what, missed, res["selected"], res["changed"], full.out[-3000:])
        stats["changed"] += bool(need)
        stats["deselected"] += res["n_deselected"]
        roll = rng.random()
        if roll < 0.15:  # re-record part of the map from the dirty tree (records carry dirty files)
            files = sorted({n.split("::")[0] for n in full.summary if "::" in n})
            pick = rng.sample(files, k=min(len(files), rng.randint(1, 2)))
            proj.record("-o", f"kernelcache_kernels={rng.choice(['ka', 'kb', 'kc'])}", *pick)
        proj.commit(f"after {what}")
        if 0.15 <= roll < 0.35:  # re-record part of the map at the new commit
            files = sorted({n.split("::")[0] for n in full.summary if "::" in n})
            proj.record("-o", "kernelcache_kernels=", *rng.sample(files, k=min(len(files), rng.randint(1, 3))))
        elif roll > 0.95:
            proj.record()
        base_out = full.summary
    print(f"seed {seed}: {stats}")
    assert stats["edits"] == EDITS_PER_SEED and stats["changed"] >= 5 and stats["deselected"] > 0 and stats["submodule"] > 0 and stats["witnessed"] >= stats["deselected"]
