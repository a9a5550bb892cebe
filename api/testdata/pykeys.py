"""Lists the keys the Python package reads from the files a mount serves.

Run as `python3 pykeys.py PACKAGE_DIR`; prints a JSON list of
{"file": "config.json", "key": "dataset.skipped_corrupt.count",
"where": "mount.py:92"}, one per read, for api's TestPythonReadsOnlyKeysTheMountWrites.

It parses the package's source (ast) rather than importing it: importing
corgifs imports torch and numpy, and a run only reaches the keys of the
branches it takes, where the source has them all. The analysis follows
values, not names:
  - a reader is a function whose body names the file ("config.json") and
    returns json.load(...), or returns what a reader returns (as
    _config_or_none does);
  - a value read from a reader carries the file and the key path so far;
    x.get("k"), x["k"] and "k" in x extend it, and it flows through
    assignments, `a or b`, {**x}, for-loops over it, reversed/list/sorted,
    and into the parameters of the package's functions it is passed to;
  - a key given as a loop variable over a literal tuple stands for each
    string of the tuple.
A read through anything else (a value stored in an attribute, say) is not
seen: keep the readers plain.
"""

import ast
import json
import os
import sys

FILES = ("config.json", "stats.json", "status.json")


def strings_in(node):
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


class Module:
    def __init__(self, path):
        self.name = os.path.basename(path)
        with open(path) as f:
            self.tree = ast.parse(f.read(), path)
        self.funcs = {}
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.funcs.setdefault(node.name, node)


def returns_json_load(fn):
    for n in ast.walk(fn):
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Call):
            f = n.value.func
            if isinstance(f, ast.Attribute) and f.attr == "load" and isinstance(f.value, ast.Name) and f.value.id == "json":
                return True
    return False


class Analysis:
    def __init__(self, modules):
        self.modules = modules
        # readers: function name -> file it returns; params: (function
        # name, index) -> (file, path) of what callers pass.
        self.readers = {}
        self.params = {}
        self.reads = set()
        for m in modules:
            for name, fn in m.funcs.items():
                named = [f for f in FILES if f in strings_in(fn)]
                if len(named) == 1 and returns_json_load(fn):
                    self.readers[name] = named[0]

    def run(self):
        # To a fixpoint: a pass may find new readers and tainted parameters.
        while True:
            before = (dict(self.readers), dict(self.params), len(self.reads))
            for m in self.modules:
                for name, fn in m.funcs.items():
                    Function(self, m, name, fn).walk()
            if before == (self.readers, self.params, len(self.reads)):
                return


class Function:
    def __init__(self, an, mod, name, fn):
        self.an, self.mod, self.name, self.fn = an, mod, name, fn
        self.vars = {}
        self.loops = {}  # loop variable -> the strings of its literal tuple
        args = fn.args.posonlyargs + fn.args.args
        for i, a in enumerate(args):
            t = an.params.get((name, i))
            if t is not None:
                self.vars[a.arg] = t

    def walk(self):
        # Twice, so that a name bound after its first use in a loop is seen.
        for _ in range(2):
            for stmt in self.fn.body:
                self.stmt(stmt)

    def stmt(self, s):
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        if isinstance(s, ast.Assign):
            t = self.expr(s.value)
            for target in s.targets:
                if isinstance(target, ast.Name):
                    if t is not None:
                        self.vars[target.id] = t
                    else:
                        self.vars.pop(target.id, None)
        elif isinstance(s, ast.For):
            if isinstance(s.iter, (ast.Tuple, ast.List)) and isinstance(s.target, ast.Name):
                consts = [e.value for e in s.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                if consts:
                    self.loops[s.target.id] = consts
            t = self.expr(s.iter)
            if t is not None and isinstance(s.target, ast.Name):
                self.vars[s.target.id] = t
        elif isinstance(s, ast.Return) and s.value is not None:
            t = self.expr(s.value)
            if t is not None and t[1] == "" and self.name not in self.an.readers:
                self.an.readers[self.name] = t[0]
            return
        for child in ast.iter_child_nodes(s):
            if isinstance(child, ast.stmt):
                self.stmt(child)
            elif isinstance(child, ast.expr) and not (isinstance(s, (ast.Assign, ast.For))):
                self.expr(child)
            elif isinstance(child, ast.ExceptHandler):
                for c in child.body:
                    self.stmt(c)

    def read(self, t, keys, node):
        for k in keys:
            path = k if not t[1] else t[1] + "." + k
            self.an.reads.add((t[0], path, f"{self.mod.name}:{node.lineno}"))
        return [(t[0], t[1] + "." + k if t[1] else k) for k in keys]

    def keys(self, node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Name) and node.id in self.loops:
            return self.loops[node.id]
        return []

    def expr(self, e):
        """The (file, path) e carries, or None; records the reads in e."""
        if e is None:
            return None
        if isinstance(e, ast.Name):
            return self.vars.get(e.id)
        if isinstance(e, ast.Call):
            for a in e.args:
                self.expr(a)
            for kw in e.keywords:
                self.expr(kw.value)
            f = e.func
            if isinstance(f, ast.Attribute) and f.attr == "get" and e.args:
                t = self.expr(f.value)
                if t is not None:
                    got = self.read(t, self.keys(e.args[0]), e)
                    return got[0] if len(got) == 1 else None
                return None
            if isinstance(f, ast.Attribute):
                self.expr(f.value)
                return None
            if isinstance(f, ast.Name):
                if f.id in self.an.readers:
                    return (self.an.readers[f.id], "")
                if f.id in ("reversed", "list", "sorted", "iter", "dict") and e.args:
                    return self.expr(e.args[0])
                for i, a in enumerate(e.args):
                    t = self.expr(a)
                    if t is not None and any(f.id in m.funcs for m in self.an.modules):
                        self.an.params.setdefault((f.id, i), t)
            return None
        if isinstance(e, ast.Subscript):
            t = self.expr(e.value)
            self.expr(e.slice)
            if t is not None:
                got = self.read(t, self.keys(e.slice), e)
                return got[0] if len(got) == 1 else None
            return None
        if isinstance(e, ast.Compare):
            left = self.expr(e.left)
            for op, right in zip(e.ops, e.comparators):
                t = self.expr(right)
                if isinstance(op, (ast.In, ast.NotIn)) and t is not None:
                    self.read(t, self.keys(e.left), e)
            return left if not e.ops else None
        if isinstance(e, ast.BoolOp):
            ts = [self.expr(v) for v in e.values]
            return next((t for t in ts if t is not None), None)
        if isinstance(e, ast.Dict):
            ts = [self.expr(v) for v in e.values]
            for k in e.keys:
                self.expr(k)
            # {**cfg, **fmt}: the merge carries the first spread's file.
            return next((t for k, t in zip(e.keys, ts) if k is None and t is not None), None)
        for child in ast.iter_child_nodes(e):
            if isinstance(child, ast.expr):
                self.expr(child)
        return None


def main(pkg):
    mods = [Module(os.path.join(pkg, f)) for f in sorted(os.listdir(pkg)) if f.endswith(".py")]
    an = Analysis(mods)
    an.run()
    out = [{"file": f, "key": k, "where": w} for f, k, w in sorted(an.reads)]
    json.dump({"readers": an.readers, "reads": out}, sys.stdout, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
