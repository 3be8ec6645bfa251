"""The ML-Images semantic hierarchy: load and validate it, close labels under ancestors,
make scores consistent with the tree, and find records that are not closed (issue #17).

File format (`dictionary_and_semantic_hierarchy.txt`, as published): an optional header
line `category_index  category_id  index_of_parent_category  category name`, then one
TAB-separated line per class

    <index>  <id>  <parent index>  <name>

with indices 0..N-1 in order, parent -1 for a root, and a name that may hold spaces and
commas (WordNet synonyms, "dog, domestic dog, Canis familiaris"). Blank lines, trailing
whitespace and CRLF are tolerated; anything else wrong is a HierarchyError, one line
naming the file, the line and the fix.

Notation: p(c) is the parent of class c, A(c) = {p(c), p(p(c)), ...} its ancestors up to
a root, D(c) = {d : c in A(d)} its descendants, y a label vector (0 = not annotated,
(0, 1] = confidence, negative = ignore, -1 in the project's lists), s a score vector.

    depth(c)        = |A(c)|                          (a root has depth 0; edges, not nodes)
    leaf(c)         = D(c) is empty
    subtree_max(v)c = max(v_c, max_{d in D(c)} v_d)   (bottom-up, one tree level at a time)
    close(y)c       = subtree_max(max(y, 0))c         if y_c == 0  (the highest confidence
                    = y_c                             otherwise     of annotated descendants)
    added(y)        = |{c : y_c == 0, close(y)c > 0}|
    consistent(s)   = subtree_max(s)                  (so s'_a >= s'_c for every a in A(c))
    violations(y)c  = |{a in A(c) : 0 <= y_a < t}|    if y_c >= t, else 0
                      (t = mask_thres > 0: an ignored ancestor, y_a < 0, is no violation)

Decisions where issue #17 is silent:
- An ancestor that is already annotated keeps its own value, even when lower than a
  descendant's: the annotator said so, and close() only fills what is missing.
- Negative (ignored) classes neither change nor propagate; an ignored class between an
  annotated class and an unannotated ancestor does not block the ancestor's closure.
- Closure of an ignored ancestor is impossible, so a positive class under an ignored
  ancestor is not counted by violations(): rebuilding with --hierarchy could not fix it.
- The published file has 11,166 classes in 4 trees; its longest root-to-leaf path has 16
  edges (17 classes, e.g. "English springer" ... "object, physical object"): depth <= 16.
"""
import re

import numpy as np
from mlimages.errors import HierarchyError

INTEGER = re.compile(r'-?[0-9]+')
HEADER_FIELD = 'category_index'
FIELDS = 4


class Hierarchy:
    """A validated forest of N classes.

    parents  int64 [N], -1 for a root        ids, names  lists of N str
    depth    int64 [N], root = 0             levels      list: classes at depth 0, 1, ...
    roots, leaves  int64 class indices       is_leaf     bool [N]
    """

    def __init__(self, parents, ids, names, path='<hierarchy>', linenos=None):
        self.path = path
        self.parents = np.asarray(parents, dtype=np.int64)
        self.ids, self.names = list(ids), list(names)
        n = len(self.parents)
        linenos = list(range(1, n + 1)) if linenos is None else linenos
        bad = np.flatnonzero((self.parents < -1) | (self.parents >= n))
        if bad.size:
            raise HierarchyError(path, linenos[bad[0]], 'parent %d of class %d is out of '
                                 'range' % (self.parents[bad[0]], bad[0]),
                                 'a parent is -1 (root) or a class index 0..%d' % (n - 1))
        self.depth = _depths(self.parents, path, linenos)
        self.levels = [np.flatnonzero(self.depth == d) for d in range(self.max_depth + 1)]
        self.is_leaf = np.ones(n, dtype=bool)
        self.is_leaf[self.parents[self.parents >= 0]] = False
        self.roots = np.flatnonzero(self.parents < 0)
        self.leaves = np.flatnonzero(self.is_leaf)
        # Per level below the roots: its classes grouped by parent, for np.maximum.reduceat.
        self._groups = []
        for level in self.levels[1:]:
            children = level[np.argsort(self.parents[level], kind='stable')]
            parent_of = self.parents[children]
            starts = np.flatnonzero(np.r_[True, parent_of[1:] != parent_of[:-1]])
            self._groups.append((children, starts, parent_of[starts]))
        self._table = None

    def __len__(self):
        return len(self.parents)

    @property
    def max_depth(self):
        """The most ancestors any class has (the longest root-to-leaf path, in edges)."""
        return int(self.depth.max()) if len(self.depth) else 0

    def ancestor_table(self):
        """int64 [N, max_depth]: row c is ancestors(c), parent first, padded with -1.

        N x 16 indices instead of a dense N x N matrix (1.4 MB, not 124 MB for ML-Images);
        column k is the parent map applied k + 1 times."""
        if self._table is None:
            n = len(self)
            table = np.full((n, self.max_depth), -1, dtype=np.int64)
            step = self.parents
            for k in range(self.max_depth):
                table[:, k] = step
                step = np.where(step >= 0, self.parents[np.maximum(step, 0)], -1)
            self._table = table
        return self._table

    def ancestors(self, c):
        """The ancestors of class c, parent first, up to its root ([] for a root)."""
        return [int(a) for a in self.ancestor_table()[c, :self.depth[c]]]

    def path_names(self, c):
        """The names from class c up to its root, c first."""
        return [self.names[a] for a in [c] + self.ancestors(c)]

    def path_text(self, c, short=True):
        """'dog < canine < carnivore < ... < object': the path to the root as one string;
        short keeps each name's first synonym (the text before its first ', ')."""
        names = self.path_names(c)
        if short:
            names = [name.split(', ')[0] for name in names]
        return ' < '.join(names)


def load(path):
    """Read and validate a hierarchy file (format in the module docstring) -> Hierarchy."""
    fix_format = ('expected %d TAB-separated fields: index, id, parent index (-1 for a '
                  'root), name' % FIELDS)
    try:
        with open(path, 'rb') as f:
            raw_lines = f.read().splitlines()
    except OSError as exc:
        raise HierarchyError(path, 0, 'cannot read the hierarchy file (%s)' % exc.strerror,
                             'give the path of dictionary_and_semantic_hierarchy.txt') from None
    parents, ids, names, linenos = [], [], [], []
    for lineno, raw in enumerate(raw_lines, 1):
        try:
            line = raw.decode('utf-8').rstrip()
        except UnicodeDecodeError:
            raise HierarchyError(path, lineno, 'not UTF-8 text', 'save the file as UTF-8') \
                from None
        if not line:
            continue
        fields = line.split('\t')
        if not linenos and line.split()[0] == HEADER_FIELD:
            continue
        if len(fields) != FIELDS:
            raise HierarchyError(path, lineno, 'malformed line with %d field(s)'
                                 % len(fields), fix_format)
        index, parent = _integer(fields[0]), _integer(fields[2])
        if index is None or parent is None:
            raise HierarchyError(path, lineno, 'malformed line, index %r and parent %r '
                                 'must be integers' % (fields[0], fields[2]), fix_format)
        if index != len(parents):
            raise HierarchyError(path, lineno, 'class index %d where %d was expected'
                                 % (index, len(parents)),
                                 'number the classes 0, 1, 2, ... in file order')
        if parent == index:
            raise HierarchyError(path, lineno, 'class %d is its own parent' % index,
                                 'give a root parent -1, any other class its real parent')
        parents.append(parent)
        ids.append(fields[1].strip())
        names.append(fields[3].strip())
        linenos.append(lineno)
    if not parents:
        raise HierarchyError(path, 0, 'no classes', 'give one line per class after the header')
    return Hierarchy(parents, ids, names, path, linenos)


def _integer(text):
    text = text.strip()
    return int(text) if INTEGER.fullmatch(text) else None


def _depths(parents, path, linenos):
    """depth(c) = depth(p(c)) + 1, resolved level by level from the roots; whatever is
    left unresolved after that can never reach a root, i.e. lies on or below a cycle."""
    depth = np.full(len(parents), -1, dtype=np.int64)
    depth[parents < 0] = 0
    frontier, d = parents < 0, 0
    while frontier.any():
        d += 1
        frontier = (depth < 0) & frontier[np.maximum(parents, 0)] & (parents >= 0)
        depth[frontier] = d
    if (depth < 0).any():
        # Walking N parents from an unresolved class ends on its cycle.
        c = int(np.flatnonzero(depth < 0)[0])
        for _ in range(len(parents)):
            c = int(parents[c])
        cycle = _cycle_from(min(_cycle_from(c, parents)), parents)
        start = cycle[0]
        text = ' -> '.join(map(str, cycle[:8] + ([start] if len(cycle) <= 8 else ['...'])))
        raise HierarchyError(path, linenos[start], 'class %d is on a cycle of parents (%s)'
                             % (start, text),
                             'every chain of parents must end at a root (parent -1)')
    return depth


def _cycle_from(c, parents):
    cycle = [c]
    while int(parents[cycle[-1]]) != c:
        cycle.append(int(parents[cycle[-1]]))
    return cycle


def _as_classes(values, h, what):
    values = np.asarray(values)
    if values.ndim not in (1, 2) or values.shape[-1] != len(h):
        raise ValueError('%s must have shape [%d] or [batch, %d], got %s'
                         % (what, len(h), len(h), values.shape))
    return values


def subtree_max(values, h):
    """subtree_max(v)c = max of v over class c and all its descendants; v is [C] or [B, C].

    Levels are processed from the deepest up, so a parent sees its children's finished
    maxima; within a level the children are grouped by parent for np.maximum.reduceat."""
    values = _as_classes(values, h, 'values')
    # Class-major [C, B] so that gathering classes gathers contiguous rows.
    out = np.array(values.T if values.ndim == 2 else values[:, None], order='C')
    for children, starts, parents in reversed(h._groups):
        out[parents] = np.maximum(out[parents],
                                  np.maximum.reduceat(out[children], starts, axis=0))
    return out.T if values.ndim == 2 else out[:, 0]


def close_labels(labels, h):
    """Labels closed under ancestors: close(y) of the module docstring, and added(y).

    labels: float [C] or [B, C]. Returns (closed, added): closed has the dtype and shape
    of labels; added is the number of labels filled in, an int for [C], int64 [B] for
    [B, C]."""
    labels = _as_classes(labels, h, 'labels')
    best = subtree_max(np.maximum(labels, 0), h)
    fill = (labels == 0) & (best > 0)
    closed = np.where(fill, best, labels).astype(labels.dtype, copy=False)
    added = fill.sum(axis=-1)
    return closed, (int(added) if labels.ndim == 1 else added)


def close_sparse(index, value, h):
    """close_labels for the compact record layout (label/index, label/value).

    index: class indices (unique, any order); value: their confidences. Returns
    (index int64 ascending, value float32, added) with the classes whose closed value is
    non-zero; a label that stays empty is the single entry 0 -> 0.0, as
    tools/make_tfrecords.py stores it."""
    index = np.asarray(index, dtype=np.int64).reshape(-1)
    value = np.asarray(value, dtype=np.float32).reshape(-1)
    if index.shape != value.shape:
        raise ValueError('label index and value differ in length: %d and %d'
                         % (index.size, value.size))
    if index.size and (index.min() < 0 or index.max() >= len(h)):
        raise ValueError('label index outside 0..%d' % (len(h) - 1))
    if np.unique(index).size != index.size:
        raise ValueError('label index lists a class twice')
    annotated = value > 0
    table = h.ancestor_table()[index[annotated]]
    source = np.broadcast_to(value[annotated][:, None], table.shape)
    known = table >= 0
    anc, conf = table[known], source[known]
    # Keep the highest confidence per ancestor: sort by (ancestor, -confidence).
    order = np.lexsort((-conf, anc))
    anc, conf = anc[order], conf[order]
    first = np.r_[True, anc[1:] != anc[:-1]] if anc.size else np.zeros(0, bool)
    anc, conf = anc[first], conf[first]
    # Only ancestors that are not annotated (absent or 0) are filled.
    nonzero = value != 0
    new = ~np.isin(anc, index[nonzero])
    anc, conf = anc[new], conf[new]
    out_index = np.concatenate([index[nonzero], anc])
    out_value = np.concatenate([value[nonzero], conf])
    if not out_index.size:
        return np.zeros(1, np.int64), np.zeros(1, np.float32), 0
    order = np.argsort(out_index, kind='stable')
    return out_index[order], out_value[order], int(anc.size)


def consistent_scores(scores, h):
    """Scores made consistent with the tree: consistent(s) = subtree_max(s), so that every
    ancestor scores at least as high as each of its descendants; [C] or [B, C]."""
    return subtree_max(scores, h)


def violations(labels, h, mask_thres):
    """(class, ancestor) pairs that closure should have made positive (module docstring).

    labels: [C] or [B, C]; mask_thres > 0 is the positive threshold (y >= mask_thres,
    compared in float32 like training and tools/check_tfrecords.py).
    Returns (per_class, per_record): per_class int64 [C] counts, summed over records,
    the pairs whose positive class is c (rank it to list the worst classes); per_record
    counts each record's pairs (int for [C], int64 [B]); a record violates iff > 0.
    An ancestor with a negative (ignore) value is not a violation."""
    if not mask_thres > 0:
        raise ValueError('mask_thres must be > 0, got %r' % (mask_thres,))
    labels = _as_classes(labels, h, 'labels')
    # float32 labels against a float32 threshold, as training compares them: 0.7 >= 0.7.
    t = np.float32(mask_thres)
    y = np.array(labels.T if labels.ndim == 2 else labels[:, None], np.float32, order='C')
    missing = ((y >= 0) & (y < t)).astype(np.int32)
    # Missing ancestors of c = those of p(c) plus p(c) itself, top-down by level.
    above = np.zeros_like(missing)
    for children, _, _ in h._groups:
        parent_of = h.parents[children]
        above[children] = above[parent_of] + missing[parent_of]
    pairs = np.where(y >= t, above, 0)
    per_class, per_record = pairs.sum(axis=1, dtype=np.int64), pairs.sum(axis=0, dtype=np.int64)
    return per_class, (int(per_record[0]) if labels.ndim == 1 else per_record)


def split_leaf_inner(h):
    """(leaf, inner): bool [N] masks of the classes without and with children, for mAP
    reported separately on leaves (what a flat classifier is judged on) and inner classes."""
    return h.is_leaf.copy(), ~h.is_leaf


def class_num_mismatch(h, class_num, what='--class_num'):
    """The one-line error for a hierarchy whose class count is not the labels' or model's."""
    return ('%s has %d classes but %s is %d; give the hierarchy of the classes the labels '
            'and the model index (11166 for ML-Images)' % (h.path, len(h), what, class_num))
