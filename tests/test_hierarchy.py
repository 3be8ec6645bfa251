"""hierarchy.py against hand-written answers on a small tree, naive pure-Python references
on random trees and labels, bad hierarchy files, and the published ML-Images file's shape
(when ../shared/data holds it)."""
from pathlib import Path

import numpy as np
import pytest

from mlimages.data import hierarchy as H

PUBLISHED = (Path(__file__).resolve().parents[2] / 'shared' / 'data'
             / 'dictionary_and_semantic_hierarchy.txt')

# Two roots, depth 3, and one parent listed after its child (2 -> 9), as the published
# file has one too.
SMALL = [  # index, id, parent, name
    (0, 'n0', -1, 'animal, animate being'),
    (1, 'n1', 0, 'dog, domestic dog'),
    (2, 'n2', 9, 'toy terrier'),
    (3, 'n3', -1, 'plant'),
    (4, 'n4', 0, 'cat'),
    (5, 'n5', 3, 'tree'),
    (6, 'n6', 1, 'puppy'),
    (7, 'n7', 5, 'oak, oak tree'),
    (8, 'n8', 3, 'rose'),
    (9, 'n9', 1, 'terrier'),
]
SMALL_ANCESTORS = [[], [0], [9, 1, 0], [], [0], [3], [1, 0], [5, 3], [3], [1, 0]]
SMALL_DEPTH = [0, 1, 3, 0, 1, 1, 2, 2, 1, 2]
SMALL_ROOTS = [0, 3]
SMALL_LEAVES = [2, 4, 6, 7, 8]
HEADER = 'category_index\tcategory_id\tindex_of_parent_category\tcategory name'


def write(tmp_path, rows, header=True, newline='\n', name='hierarchy.txt'):
    lines = ([HEADER] if header else []) + ['\t'.join(map(str, row)) for row in rows]
    path = tmp_path / name
    path.write_bytes((newline.join(lines) + newline).encode('utf-8'))
    return path


@pytest.fixture
def small(tmp_path):
    return H.load(write(tmp_path, SMALL))


# ------------------------------------------------------------------ naive references

def naive_ancestors(parents, c):
    out = []
    while parents[c] >= 0:
        c = parents[c]
        out.append(c)
    return out


def naive_close(y, parents):
    """Row by row, class by class: an unannotated class takes the highest positive value
    among the classes that have it as an ancestor."""
    y = np.asarray(y, dtype=np.float64)
    out, added = y.copy(), 0
    for c in range(len(parents)):
        if y[c] != 0:
            continue
        below = [y[d] for d in range(len(parents))
                 if c in naive_ancestors(parents, d) and y[d] > 0]
        if below:
            out[c] = max(below)
            added += 1
    return out, added


def naive_subtree_max(s, parents):
    children = {c: [d for d in range(len(parents)) if parents[d] == c]
                for c in range(len(parents))}

    def best(c):
        return max([s[c]] + [best(d) for d in children[c]])
    return np.array([best(c) for c in range(len(parents))])


def naive_violations(y, parents, t):
    y, t = np.asarray(y, np.float32), np.float32(t)  # as training compares
    return np.array([sum(1 for a in naive_ancestors(parents, c) if 0 <= y[a] < t)
                     if y[c] >= t else 0 for c in range(len(parents))])


def random_tree(rng, n, roots):
    """A random forest of n classes, parents drawn among earlier classes, then the indices
    shuffled so that parents come after children too."""
    parents = [-1] * roots + [int(rng.randint(0, k)) for k in range(roots, n)]
    perm = rng.permutation(n)  # old index -> new index
    new = [0] * n
    for old, p in enumerate(parents):
        new[perm[old]] = -1 if p < 0 else int(perm[p])
    return H.Hierarchy(new, ['n%d' % c for c in range(n)], ['c%d' % c for c in range(n)])


def random_labels(rng, batch, n):
    """Mostly 0, some -1, some soft confidences in (0, 1], some exactly 1 (float32)."""
    kind = rng.choice(4, size=(batch, n), p=[0.7, 0.1, 0.1, 0.1])
    soft = rng.randint(1, 11, size=(batch, n)) / 10.0
    return np.select([kind == 1, kind == 2, kind == 3], [-1.0, soft, 1.0], 0.0) \
        .astype(np.float32)


# ------------------------------------------------------------------ the small tree

def test_small_tree_queries_are_the_hand_written_answers(small):
    assert len(small) == 10 and small.max_depth == 3
    assert [small.ancestors(c) for c in range(10)] == SMALL_ANCESTORS
    assert small.depth.tolist() == SMALL_DEPTH
    assert small.roots.tolist() == SMALL_ROOTS
    assert small.leaves.tolist() == SMALL_LEAVES
    assert np.flatnonzero(small.is_leaf).tolist() == SMALL_LEAVES
    assert [level.tolist() for level in small.levels] == [[0, 3], [1, 4, 5, 8], [6, 7, 9], [2]]
    assert small.ids[7] == 'n7' and small.names[7] == 'oak, oak tree'
    table = small.ancestor_table()
    assert table.shape == (10, 3)
    assert table[2].tolist() == [9, 1, 0] and table[5].tolist() == [3, -1, -1]
    leaf, inner = H.split_leaf_inner(small)
    assert np.flatnonzero(leaf).tolist() == SMALL_LEAVES
    assert np.flatnonzero(inner).tolist() == [0, 1, 3, 5, 9]


def test_path_names_and_text(small):
    assert small.path_names(2) == ['toy terrier', 'terrier', 'dog, domestic dog',
                                   'animal, animate being']
    assert small.path_text(2) == 'toy terrier < terrier < dog < animal'
    assert small.path_text(7, short=False) == 'oak, oak tree < tree < plant'
    assert small.path_text(3) == 'plant'


def test_crlf_trailing_whitespace_blank_lines_and_no_header_are_accepted(tmp_path, small):
    rows = [(i, cid + '  ', p, name + ' ') for i, cid, p, name in SMALL]
    for path in (write(tmp_path, rows, newline='\r\n', name='crlf.txt'),
                 write(tmp_path, SMALL, header=False, name='bare.txt')):
        h = H.load(path)
        assert h.parents.tolist() == small.parents.tolist()
        assert h.names == small.names and h.ids == small.ids
    blank = tmp_path / 'blank.txt'
    blank.write_text(write(tmp_path, SMALL).read_text() + '\n\n')
    assert H.load(blank).parents.tolist() == small.parents.tolist()


def test_small_tree_closure_by_hand(small):
    y = np.zeros(10, np.float32)
    y[2], y[6], y[1], y[7], y[5] = 0.6, 0.9, -1, 0.4, 0.2
    closed, added = H.close_labels(y, small)
    # terrier (9) and animal (0) are filled; dog (1) stays ignored; tree (5) keeps its 0.2
    # below oak's 0.4; plant (3) gets oak's 0.4.
    expected = y.copy()
    expected[9], expected[0], expected[3] = 0.6, 0.9, 0.4
    assert closed.tolist() == expected.tolist() and added == 3
    assert closed.dtype == np.float32 and y[0] == 0  # input untouched


# ------------------------------------------------------------------ closure

@pytest.mark.parametrize('seed', range(4))
def test_closure_matches_the_naive_reference_dense_and_sparse(seed):
    rng = np.random.RandomState(seed)
    h = random_tree(rng, 60, roots=1 + seed % 3)
    y = random_labels(rng, 25, len(h))
    closed, added = H.close_labels(y, h)
    assert added.shape == (25,)
    for b in range(len(y)):
        want, want_added = naive_close(y[b], h.parents.tolist())
        np.testing.assert_array_equal(closed[b], want.astype(np.float32))
        assert added[b] == want_added
        one, one_added = H.close_labels(y[b], h)
        np.testing.assert_array_equal(one, closed[b])
        assert one_added == want_added and isinstance(one_added, int)
        # Sparse: the non-zero entries, shuffled, plus an explicit 0 entry when any.
        index = np.flatnonzero(y[b])
        zero = np.flatnonzero(y[b] == 0)[:1]
        index = rng.permutation(np.r_[index, zero])
        got_index, got_value, got_added = H.close_sparse(index, y[b, index], h)
        assert got_added == want_added
        assert got_index.dtype == np.int64 and got_value.dtype == np.float32
        assert np.all(np.diff(got_index) > 0)
        if not np.any(want):
            assert got_index.tolist() == [0] and got_value.tolist() == [0.0]
        else:
            assert got_index.tolist() == np.flatnonzero(want).tolist()
            np.testing.assert_array_equal(got_value, want[got_index].astype(np.float32))


def test_sparse_empty_label_is_the_single_entry_0(small):
    for index, value in (([], []), ([0], [0.0]), ([4], [0.0])):
        got = H.close_sparse(index, value, small)
        assert got[0].tolist() == [0] and got[1].tolist() == [0.0] and got[2] == 0
    index, value, added = H.close_sparse([1], [-1.0], small)
    assert index.tolist() == [1] and value.tolist() == [-1.0] and added == 0


def test_bad_label_arguments_are_rejected(small):
    with pytest.raises(ValueError, match=r'shape \[10\] or \[batch, 10\]'):
        H.close_labels(np.zeros(9), small)
    with pytest.raises(ValueError, match='twice'):
        H.close_sparse([3, 3], [1, 1], small)
    with pytest.raises(ValueError, match='outside'):
        H.close_sparse([10], [1], small)
    with pytest.raises(ValueError, match='differ in length'):
        H.close_sparse([1, 2], [1], small)
    with pytest.raises(ValueError, match='mask_thres'):
        H.violations(np.zeros(10), small, 0)


# ------------------------------------------------------------------ consistent scores

@pytest.mark.parametrize('seed', range(3))
def test_consistent_scores_are_monotone_and_the_naive_subtree_max(seed):
    rng = np.random.RandomState(10 + seed)
    h = random_tree(rng, 50, roots=2)
    s = rng.randn(8, len(h)).astype(np.float32)  # logits too: negative scores allowed
    out = H.consistent_scores(s, h)
    assert out.shape == s.shape and out.dtype == s.dtype
    for b in range(len(s)):
        np.testing.assert_array_equal(out[b], naive_subtree_max(s[b], h.parents.tolist()))
        for c in range(len(h)):
            assert all(out[b, a] >= out[b, c] for a in h.ancestors(c))
        np.testing.assert_array_equal(H.consistent_scores(s[b], h), out[b])
    assert np.all(out >= s)
    # Already consistent scores are returned unchanged.
    np.testing.assert_array_equal(H.consistent_scores(out, h), out)
    depth_scores = (1.0 - h.depth / 10.0)[None, :].repeat(3, 0)
    np.testing.assert_array_equal(H.consistent_scores(depth_scores, h), depth_scores)


# ------------------------------------------------------------------ violations

@pytest.mark.parametrize('seed', range(3))
def test_violations_match_the_naive_count_and_closure_removes_them(seed):
    rng = np.random.RandomState(20 + seed)
    h = random_tree(rng, 50, roots=3)
    y = random_labels(rng, 12, len(h))
    per_class, per_record = H.violations(y, h, 0.7)
    naive = [naive_violations(y[b], h.parents.tolist(), 0.7) for b in range(len(y))]
    np.testing.assert_array_equal(per_class, np.sum(naive, axis=0))
    np.testing.assert_array_equal(per_record, [n.sum() for n in naive])
    one_class, one_record = H.violations(y[0], h, 0.7)
    assert one_record == naive[0].sum() and one_class.tolist() == naive[0].tolist()
    # With hard labels (0, 1, -1) closure leaves no violation.
    hard = np.where(y > 0, 1.0, y).astype(np.float32)
    assert H.violations(H.close_labels(hard, h)[0], h, 0.7)[1].sum() == 0


def test_violations_by_hand(small):
    y = np.zeros(10)
    y[2], y[1] = 1.0, -1  # toy terrier: terrier missing, dog ignored, animal missing
    y[7], y[5] = 0.8, 0.3  # oak: tree annotated below the threshold, plant missing
    per_class, per_record = H.violations(y, small, 0.7)
    assert per_record == 4
    assert per_class.tolist() == [0, 0, 2, 0, 0, 0, 0, 2, 0, 0]
    # float32 0.7 is positive at mask_thres 0.7, as in training; 0.69 is not.
    y32 = np.zeros(10, np.float32)
    y32[6] = 0.7
    assert H.violations(y32, small, 0.7)[1] == 2
    y32[6] = 0.69
    assert H.violations(y32, small, 0.7)[1] == 0


# ------------------------------------------------------------------ bad files

def bad_rows(**changes):
    rows = [list(row) for row in SMALL]
    for index, row in changes.items():
        rows[int(index[1:])] = row
    return rows


@pytest.mark.parametrize('rows, lineno, text', [
    (bad_rows(c4=[4, 'n4', 10, 'cat']), 6, 'parent 10 of class 4 is out of range'),
    (bad_rows(c4=[4, 'n4', -2, 'cat']), 6, 'parent -2 of class 4 is out of range'),
    (bad_rows(c6=[6, 'n6', 2, 'puppy'], c1=[1, 'n1', 6, 'dog']), 3,
     r'class 1 is on a cycle of parents \(1 -> 6 -> 2 -> 9 -> 1\)'),
    (bad_rows(c3=[3, 'n3', 3, 'plant']), 5, 'class 3 is its own parent'),
    (bad_rows(c5=[5, 'n5', 3]), 7, r'malformed line with 3 field\(s\)'),
    (bad_rows(c5=[5, 'n5', 3, 'tree', 'extra']), 7, r'malformed line with 5 field\(s\)'),
    (bad_rows(c5=['5 n5 3 tree']), 7, r'malformed line with 1 field\(s\)'),
    (bad_rows(c5=[5, 'n5', 'x', 'tree']), 7, "parent 'x' must be integers"),
    (bad_rows(c5=['five', 'n5', 3, 'tree']), 7, "index 'five'"),
    (bad_rows(c5=[6, 'n5', 3, 'tree']), 7, 'class index 6 where 5 was expected'),
    (bad_rows(c5=['1_0', 'n5', 3, 'tree']), 7, "index '1_0'"),
    (SMALL[:3] + SMALL[4:], 5, 'class index 4 where 3 was expected'),
])
def test_bad_files_are_one_line_errors_naming_the_line(tmp_path, rows, lineno, text):
    path = write(tmp_path, rows)
    with pytest.raises(H.HierarchyError, match=text) as info:
        H.load(path)
    message = str(info.value)
    assert message.startswith('%s:%d: ' % (path, lineno))
    assert '\n' not in message and '; ' in message  # the problem, then the fix
    assert info.value.lineno == lineno and isinstance(info.value, ValueError)


def test_missing_empty_and_undecodable_files(tmp_path):
    with pytest.raises(H.HierarchyError, match='cannot read'):
        H.load(tmp_path / 'absent.txt')
    empty = tmp_path / 'empty.txt'
    empty.write_text(HEADER + '\n')
    with pytest.raises(H.HierarchyError, match='no classes'):
        H.load(empty)
    latin = tmp_path / 'latin.txt'
    latin.write_bytes((HEADER + '\n0\tn0\t-1\tcaf\xe9\n').encode('latin-1'))
    with pytest.raises(H.HierarchyError, match=r'latin.txt:2: not UTF-8'):
        H.load(latin)


# ------------------------------------------------------------------ the published file

@pytest.fixture(scope='module')
def published():
    if not PUBLISHED.exists():
        pytest.skip('the published hierarchy is not at %s (only the maintainers\' '
                    'checkout has ../shared/data)' % PUBLISHED)
    return H.load(PUBLISHED)


def test_published_file_shape(published):
    h = published
    assert len(h) == 11166 == len(h.ids) == len(h.names)
    assert [h.names[r] for r in h.roots] == ['thing', 'matter', 'object, physical object',
                                            'atmospheric phenomenon']
    # "The longest root-to-leaf path has 16 steps": 16 edges, i.e. 17 classes.
    assert h.max_depth == 16 and np.sum(h.depth == 16) == 10
    deepest = int(np.argmax(h.depth))
    assert len(h.path_names(deepest)) == 17
    assert h.path_text(deepest).startswith('English springer < springer spaniel < spaniel')
    assert h.path_text(deepest).endswith('< living thing < whole < object')
    leaf, inner = H.split_leaf_inner(h)
    assert leaf.sum() == 9219 and inner.sum() == 11166 - 9219
    parents = h.parents.tolist()
    assert leaf.sum() == len(set(range(len(h))) - set(parents))
    table = h.ancestor_table()
    assert table.shape == (11166, 16)
    for c in range(len(h)):
        assert table[c, :h.depth[c]].tolist() == naive_ancestors(parents, c)
        assert np.all(table[c, h.depth[c]:] == -1)


def test_published_closure_of_a_deep_leaf_is_its_whole_path(published):
    h = published
    deepest = int(np.argmax(h.depth))
    y = np.zeros(len(h), np.float32)
    y[deepest] = 0.8
    closed, added = H.close_labels(y, h)
    assert added == 16
    assert np.flatnonzero(closed).tolist() == sorted([deepest] + h.ancestors(deepest))
    assert np.all(closed[closed > 0] == np.float32(0.8))
    index, value, sparse_added = H.close_sparse([deepest], [0.8], h)
    assert index.tolist() == np.flatnonzero(closed).tolist() and sparse_added == 16
    dog = h.names.index('dog, domestic dog, Canis familiaris')
    assert h.path_text(dog) == ('dog < canine < carnivore < placental < mammal < vertebrate'
                                ' < chordate < animal < organism < living thing < whole'
                                ' < object')
    # Closed labels have no violations; the unclosed one has 16 (one per ancestor).
    assert H.violations(y, h, 0.7)[1] == 16 and H.violations(closed, h, 0.7)[1] == 0
