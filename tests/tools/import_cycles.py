#!/usr/bin/env python3
"""Import cycles between files of src/: an edge A -> B when A names an item
through a path (`use`, or inline) that resolves to a module in file B,
unless B is an ancestor of A (a child using its parent module's own
vocabulary). Re-exports count as edges of the re-exporting file."""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else 'src'
files = {}
for dp, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            p = os.path.join(dp, f)
            rel = os.path.relpath(p, root)[:-3].split(os.sep)
            if rel[-1] in ('mod', 'lib', 'main'):
                rel = rel[:-1]
            files[tuple(rel)] = p
def strip_tests(s):
    i = s.find('#[cfg(test)]')
    return s if i < 0 else s[:i]
def resolve(mod, path):
    parts = path.split('::')
    if parts[0] == 'crate':
        cur = []
        parts = parts[1:]
    elif parts[0] == 'super':
        cur = list(mod)
        while parts and parts[0] == 'super':
            cur = cur[:-1]
            parts = parts[1:]
    elif parts[0] == 'self':
        cur = list(mod); parts = parts[1:]
    elif tuple(list(mod) + [parts[0]]) in files:
        cur = list(mod)
    else:
        return None
    best = tuple(cur)
    for p in parts:
        cand = tuple(cur + [p])
        if cand in files:
            cur.append(p); best = cand
        else:
            break
    return best
edges = {}
for mod, p in files.items():
    s = strip_tests(open(p).read())
    s = re.sub(r'//[^\n]*', '', s)
    # expand `use a::{b, c::d}` one level
    paths = set()
    for m in re.finditer(r'\buse\s+([^;]+);', s):
        u = re.sub(r'\s+', '', m.group(1))
        mm = re.match(r'^(.*?)::\{(.*)\}$', u)
        if mm:
            base = mm.group(1)
            depth = 0; cur = ''; items = []
            for ch in mm.group(2):
                if ch == '{': depth += 1
                if ch == '}': depth -= 1
                if ch == ',' and depth == 0:
                    items.append(cur); cur = ''
                else:
                    cur += ch
            items.append(cur)
            for it in items:
                it = it.split('{')[0].rstrip(':')
                paths.add(base + '::' + it.split(' as ')[0] if it not in ('self', '') else base)
        else:
            paths.add(u.split(' as ')[0])
    for m in re.finditer(r'(?<![:\w])((?:crate|super|[a-z_][a-z0-9_]*)(?:::[A-Za-z_][A-Za-z0-9_]*)+)', s):
        paths.add(m.group(1))
    for path in paths:
        t = resolve(mod, path)
        # A child naming its parent's items uses its own module's
        # vocabulary; only the other direction counts.
        if t is not None and t != mod and t in files and mod[:len(t)] != t:
            # a module's own submodule declarations are not imports
            edges.setdefault(mod, set()).add(t)
# Tarjan SCC
index = {}; low = {}; stack = []; on = set(); sccs = []; n = [0]
sys.setrecursionlimit(10000)
def strong(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in index:
            strong(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(comp)
for v in files:
    if v not in index: strong(v)
for c in sccs:
    print('cycle:', ' <-> '.join('/'.join(x) or 'lib' for x in sorted(c)))
print(f'{len(sccs)} cycles among {len(files)} files')
sys.exit(1 if sccs else 0)
