"""The command lines of SGLang's generated ``build.ninja``, read back as argv lists.

What the route compiles is what SGLang's ninja would run: the compilers and the three flag
variables are taken from the file's text, unescaped as ninja reads them, then split as the
shell in its rules splits them. The rules themselves are checked against the three shapes the
route reproduces (compile with ``-MD -MF``, ``-c IN -o OUT``; link ``$cxx IN $ldflags -o OUT``);
a file whose rules differ (another SGLang, a new step) is refused (:class:`Unmirrored`), and
SGLang's own JIT builds that module. ``-shared`` leaves the link flags: the plan adds it.
"""
from __future__ import annotations

import re
import shlex

from ..base.records import FrozenRecord

_RULES = {
    "compile_cxx": '$cxx -MD -MF "$out.d" $cxxflags -c "$in" -o "$out"',
    "compile_cuda": '$nvcc -MD -MF "$out.d" $cudaflags -c "$in" -o "$out"',
    "link": '$cxx $in $ldflags -o "$out"',
}
_ESCAPE = re.compile(r"\$(\$|:| |\n)")
_REFERENCE = re.compile(r"\$(\{?[A-Za-z_])")


class Unmirrored(ValueError):
    """The build file has something the route does not reproduce."""


class CommandLines(FrozenRecord):
    """One module's lines as SGLang's ninja would run them."""

    cxx: str
    nvcc: str
    cxxflags: tuple[str, ...]
    cudaflags: tuple[str, ...]
    ldflags: tuple[str, ...]  # without -shared
    units: tuple[tuple[str, str], ...]  # (rule, input as written) of each compile statement


def _unescape(value: str, where: str) -> str:
    if _REFERENCE.search(_ESCAPE.sub("", value)):
        raise Unmirrored(f"{where} refers to a ninja variable")
    return _ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), value)


def _words(value: str, where: str) -> tuple[str, ...]:
    return tuple(shlex.split(_unescape(value, where)))


def parse(text: str) -> CommandLines:
    """The command lines of one generated build file (:class:`Unmirrored` when its rules are not
    the ones the route reproduces)."""
    variables: dict[str, str] = {}
    rules: dict[str, str] = {}
    units: list[tuple[str, str]] = []
    links = 0
    rule = None
    for raw in text.replace("$\n", "").splitlines():
        line = raw.rstrip()
        if not line or line.lstrip().startswith("#"):
            continue
        if raw.startswith("  "):
            key, _, value = line.strip().partition(" = ")
            if rule is not None and key == "command":
                rules[rule] = value
            continue
        rule = None
        if line.startswith("rule "):
            rule = line[5:].strip()
        elif line.startswith("build "):
            outs, _, rest = line[6:].partition(": ")
            parts = rest.split(" ", 1)
            if parts[0] == "link":
                links += 1
            elif parts[0] in ("compile_cxx", "compile_cuda") and len(parts) == 2:
                units.append((parts[0], parts[1]))
            else:
                raise Unmirrored(f"build statement with rule {parts[0]!r}")
        elif " = " in line:
            key, _, value = line.partition(" = ")
            variables[key.strip()] = value
    for name, command in rules.items():
        if _RULES.get(name) != command:
            raise Unmirrored(f"rule {name!r} runs {command!r}")
    if links != 1 or not units:
        raise Unmirrored(f"{links} link statement(s), {len(units)} compile statement(s)")
    cxx = _words(variables.get("cxx", ""), "cxx")
    nvcc = _words(variables.get("nvcc", ""), "nvcc")
    if len(cxx) != 1 or len(nvcc) != 1:
        raise Unmirrored("a compiler variable is not one word")
    ld = _words(variables.get("ldflags", ""), "ldflags")
    return CommandLines(cxx=cxx[0], nvcc=nvcc[0], cxxflags=_words(variables.get("cxxflags", ""), "cxxflags"),
                        cudaflags=_words(variables.get("cudaflags", ""), "cudaflags"),
                        ldflags=tuple(f for f in ld if f != "-shared"), units=tuple(units))
