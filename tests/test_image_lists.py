"""Tests of mlimages/recordkit/image_lists.py: the image-list grammar, line by line and whole lists."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mlimages.data import records
from helpers import label_array, write_lines as _write
from mlimages import errors
from mlimages.recordkit import image_lists

CLASS_NUM = 12


def dense(labels, class_num=CLASS_NUM):
    return records.dense_label(list(labels), list(labels.values()), class_num)


def parse_list_line(line, class_num, source='<list>', lineno=0):
    """One line through the grammar (image_lists.parse_sparse): (path, dense float32
    label), or None for a blank line."""
    parsed = image_lists.parse_sparse(line, class_num, source, lineno)
    return None if parsed is None else (parsed[0], dense(parsed[1], class_num))


def read_list(path, class_num):
    """A whole list (image_lists.scan_list): (lineno, path, dense label) per image line."""
    return [(lineno, image, dense(labels, class_num))
            for lineno, image, labels in image_lists.scan_list(path, class_num)]


def _expected(pairs):
    return label_array(pairs, CLASS_NUM)


def test_parse_list_line_labels():
    path, label = parse_list_line(
        'n04310904/n04310904_8388.JPEG\t3:1 2 7:0.9\t11:-1\n', CLASS_NUM)
    assert path == 'n04310904/n04310904_8388.JPEG'
    assert label.dtype == np.float32 and label.shape == (CLASS_NUM,)
    np.testing.assert_array_equal(label, _expected([(3, 1), (2, 1), (7, 0.9), (11, -1)]))
    only_path = parse_list_line('a.jpg', CLASS_NUM)
    assert only_path[0] == 'a.jpg' and not only_path[1].any()
    assert parse_list_line('   \t\r\n', CLASS_NUM) is None
    # a repeated class with the same confidence is harmless
    np.testing.assert_array_equal(
        parse_list_line('a.jpg 4:0.5 4:.5', CLASS_NUM)[1], _expected([(4, 0.5)]))


@pytest.mark.parametrize('tokens, what', [
    ('12:1', 'out of range'),
    ('-1:1', 'negative class index'),
    ('3:x', 'malformed'),
    ('abc', 'malformed'),
    ('3:', 'malformed'),
    ('3:1:1', 'malformed'),
    ('3:nan', 'malformed'),
    ('3:1.5', 'outside [-1, 1]'),
    ('3:-1.01', 'outside [-1, 1]'),
    ('3:1 3:0.5', 'twice'),
])
def test_parse_list_line_errors(tokens, what):
    with pytest.raises(errors.ListFormatError) as info:
        parse_list_line('img.jpg ' + tokens, CLASS_NUM, source='lists/a.txt', lineno=7)
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith('lists/a.txt:7: ')
    assert what in str(info.value)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(0, CLASS_NUM - 1),
                       st.floats(-1, 1, allow_nan=False, width=32), max_size=CLASS_NUM),
       st.sampled_from([' ', '\t', ' \t ']))
def test_parse_list_line_round_trips(labels, sep):
    line = sep.join(['dir/img.jpg'] + ['%d:%r' % (k, float(v)) for k, v in labels.items()])
    path, label = parse_list_line(line, CLASS_NUM)
    assert path == 'dir/img.jpg'
    np.testing.assert_array_equal(label, _expected(labels.items()))


def test_read_list_numbers_lines_and_skips_blanks(tmp_path):
    lst = _write(tmp_path / 'l.txt', ['a.jpg 1:0.5', '', 'b.jpg', '  ', 'c.jpg 2'])
    rows = read_list(str(lst), CLASS_NUM)
    assert [(n, p) for n, p, _ in rows] == [(1, 'a.jpg'), (3, 'b.jpg'), (5, 'c.jpg')]
    np.testing.assert_array_equal(rows[2][2], _expected([(2, 1)]))
    _write(lst, ['a.jpg 1', 'b.jpg 99'])
    with pytest.raises(errors.ListFormatError, match=r'l\.txt:2: class index 99'):
        read_list(str(lst), CLASS_NUM)


@pytest.mark.parametrize('line,parsed', [
    ('my cat/a b.jpg\t3\t1:0.5', ('my cat/a b.jpg', {3: 1.0, 1: 0.5})),  # a tab ends the path
    ('a b.jpg\t', ('a b.jpg', {})),                                    # no labels
    ('a.jpg\t0:1 2:0.8 3:-1', ('a.jpg', {0: 1.0, 2: 0.8, 3: -1.0})),   # the published kind
    (' a.jpg \t 4', ('a.jpg', {4: 1.0})),                               # spaces around: not path
    ('\ta.jpg\t4', ('a.jpg', {4: 1.0})),                                # nothing before the tab
    ('a.jpg 4 5', ('a.jpg', {4: 1.0, 5: 1.0})),                         # no tab: fields
    ('\t \n', None)])
def test_a_path_with_spaces_ends_at_the_first_tab(line, parsed):
    assert image_lists.parse_sparse(line, CLASS_NUM, '<list>', 1) == parsed
